"""Send a batch of chat bodies to one endpoint with bounded concurrency, keeping order.

A request the endpoint fails (`ProbeUnavailable`) comes back as None and is counted; the sentinels
judge what did come back. Tokens are summed from the reported usage of each answer. Anything else
raising (a spent budget) cancels the rest of the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from probes.client import ProbeUnavailable
from probes.tasks import gather_or_cancel


class ChatClient(Protocol):
    async def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...


class Sampler:
    def __init__(
        self, client: ChatClient, *, concurrency: int, progress: Callable[[int, int], None] = lambda d, t: None
    ) -> None:
        self._client = client
        self._limit = asyncio.Semaphore(concurrency)
        self._progress = progress
        self.requests = 0
        self.errors = 0
        self.tokens = 0
        self.planned = 0
        self.done = 0

    async def chat_many(self, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any] | None]:
        self.planned += len(bodies)
        return await gather_or_cancel(*(self._one(b) for b in bodies))

    async def _one(self, body: dict[str, Any]) -> dict[str, Any] | None:
        async with self._limit:
            self.requests += 1
            try:
                data = await self._client.chat(body)
            except ProbeUnavailable:
                self.errors += 1
                return None
            finally:
                self.done += 1
                self._progress(self.done, self.planned)
        usage = data.get("usage") or {}
        self.tokens += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        return data


def answer_text(data: dict[str, Any] | None) -> tuple[str, str | None]:
    """The first choice's text and finish reason ("" and None when absent)."""
    if not data or not data.get("choices"):
        return "", None
    choice = data["choices"][0]
    message = choice.get("message") or {}
    return str(message.get("content") or ""), choice.get("finish_reason")


def prompt_tokens(data: dict[str, Any] | None) -> int | None:
    usage = (data or {}).get("usage") or {}
    value = usage.get("prompt_tokens")
    return int(value) if isinstance(value, int | float) and value > 0 else None
