"""Gather one response's tool calls for the validator: a non-streaming body as is, or a stream's
deltas assembled per choice (name, arguments, content, finish_reason).

Made only for requests that carry `tools`. Held in memory for the request's life and dropped
after classification; content is kept only up to what the leak check scans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from probes.toolcalls.validator import LEAK_SCAN_CHARS


@dataclass(slots=True)
class _Call:
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Choice:
    content: list[str] = field(default_factory=list)
    size: int = 0
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None


class ToolTrace:
    __slots__ = ("_body", "_choices", "unreadable")

    def __init__(self) -> None:
        self._body: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self.unreadable = False  # a body or chunk that was not JSON: the relay already reports it

    def feed_body(self, raw: bytes) -> None:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.unreadable = True
            return
        self._body = body if isinstance(body, dict) else None

    def feed_chunks(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.unreadable = True
                continue
            for choice in (chunk.get("choices") or ()) if isinstance(chunk, dict) else ():
                if isinstance(choice, dict):
                    self._feed_choice(choice)

    def _feed_choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        acc = self._choices.get(index)
        if acc is None:
            acc = self._choices[index] = _Choice()
        if choice.get("finish_reason"):
            acc.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        text = delta.get("content")
        if isinstance(text, str) and text and acc.size < LEAK_SCAN_CHARS:
            acc.content.append(text)
            acc.size += len(text)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._feed_call(acc, call)

    @staticmethod
    def _feed_call(acc: _Choice, call: dict[str, Any]) -> None:
        index = call.get("index", len(acc.calls))
        entry = acc.calls.get(index)
        if entry is None:
            entry = acc.calls[index] = _Call()
        fn = call.get("function")
        if not isinstance(fn, dict):
            return
        name = fn.get("name")
        # Some engines repeat the full name in every delta (llama.cpp): never concatenate a repeat.
        if isinstance(name, str) and name and name != entry.name:
            entry.name = name if not entry.name else entry.name + name
        args = fn.get("arguments")
        if isinstance(args, str):
            entry.arguments.append(args)

    def response(self) -> dict[str, Any] | None:
        """The response as a non-streaming chat completion would have it (None when nothing came)."""
        if self._body is not None:
            return self._body
        if not self._choices:
            return None
        choices = []
        for index in sorted(self._choices):
            acc = self._choices[index]
            message: dict[str, Any] = {"role": "assistant", "content": "".join(acc.content) or None}
            if acc.calls:
                message["tool_calls"] = [
                    {"type": "function", "function": {"name": c.name, "arguments": "".join(c.arguments)}}
                    for _, c in sorted(acc.calls.items())
                ]
            choices.append({"index": index, "message": message, "finish_reason": acc.finish_reason})
        return {"choices": choices}
