"""A fake Chat Completions upstream that answers from a script: each request takes the next
`Reply` (text and/or tool calls), streamed or not, the way OpenAI's wire format carries it.

Streams are the hard shapes: text in word pieces, each tool call's arguments in fragments of
`fragment` characters, and parallel calls with their fragments interleaved (call 0, call 1,
call 0, ...), then a usage chunk when `stream_options.include_usage` asks for one.
"""

from __future__ import annotations

import json
import socket
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments)
    finish: str | None = None  # default: tool_calls with calls, else stop
    prompt_tokens: int = 11
    completion_tokens: int = 7

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.calls else "stop")


@dataclass
class ScriptedChat:
    fragment: int = 4
    requests: list[dict[str, Any]] = field(default_factory=list)
    _replies: deque[Reply] = field(default_factory=deque)
    _runner: web.AppRunner | None = None
    port: int = 0
    _count: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def reset(self) -> None:
        self._replies.clear()
        self.requests.clear()
        self._count = 0  # call ids are call_<request number>_<index>: per test

    async def start(self) -> ScriptedChat:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _call_id(self, i: int) -> str:
        return f"call_{self._count:04d}_{i}"

    def _usage(self, reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 3},
        }

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        reply = self._replies.popleft() if self._replies else Reply(text="default reply")
        self._count += 1
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.calls:
                message["tool_calls"] = [
                    {"id": self._call_id(i), "type": "function", "function": {"name": n, "arguments": a}}
                    for i, (n, a) in enumerate(reply.calls)
                ]
            choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}
            return web.json_response(
                {"id": f"chatcmpl-{self._count}", "object": "chat.completion", "created": 1, "model": body["model"],
                 "choices": [choice], "usage": self._usage(reply)}
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in self._chunks(body, reply):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _chunks(self, body: dict[str, Any], reply: Reply) -> Iterator[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": f"chatcmpl-{self._count}", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        if reply.text:
            words = reply.text.split(" ")
            for i, word in enumerate(words):
                yield chunk({"content": word if i == 0 else " " + word})
        pieces = []
        for i, (name, args) in enumerate(reply.calls):
            yield chunk({"tool_calls": [{"index": i, "id": self._call_id(i), "type": "function",
                                         "function": {"name": name, "arguments": ""}}]})
            pieces.append([args[k : k + self.fragment] for k in range(0, len(args), self.fragment)])
        for step in range(max((len(p) for p in pieces), default=0)):  # interleaved across the calls
            for i, frags in enumerate(pieces):
                if step < len(frags):
                    yield chunk({"tool_calls": [{"index": i, "function": {"arguments": frags[step]}}]})
        yield chunk({}, reply.finish_reason)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {"id": f"chatcmpl-{self._count}", "object": "chat.completion.chunk", "created": 1,
                   "model": body["model"], "choices": [], "usage": self._usage(reply)}
