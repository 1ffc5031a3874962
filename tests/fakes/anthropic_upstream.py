"""A fake Anthropic Messages API upstream: a real aiohttp server on loopback speaking Anthropic's wire
format (``POST /v1/messages``, JSON and SSE with named events), strict where the real API is strict.

Refuses what Anthropic refuses: no ``x-api-key`` (401 authentication_error), no ``anthropic-version``
(400), a missing ``max_tokens``, a role other than user/assistant, a ``temperature`` above 1, unknown
top-level fields, a tool_use not answered by a tool_result in the next user turn (all 400
invalid_request_error). Answers "You said: <last user text>", or, with tools (unless
``tool_choice`` is none), a tool_use whose input fits the first (or the named) tool's schema,
streamed as ``input_json_delta`` pieces of 7 characters. ``stop_sequences`` and ``max_tokens`` cut the
text as the real API does (stop_reason stop_sequence with the matched ``stop_sequence``, or
max_tokens). ``cached_tokens`` is reported as ``cache_read_input_tokens``. With ``thinking`` enabled the
answer starts with a thinking block (its text streamed as ``thinking_delta``s, then a ``signature_delta``).

Faults from the upstream model id, as for the OpenAI fake: ``"m@status:529;retry-after=1"`` (an
error answer, Anthropic's shape), ``"m@cut:3"`` (close after 3 events), ``"m@error-event:3"`` (an
``overloaded_error`` event after 3 events).
"""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any

from aiohttp import web

from tests.fakes.openai_upstream import Behaviour, Received, _hang_up, _sample_arguments, _words

REPLY_PREFIX = "You said: "
TOP_LEVEL = frozenset(
    {
        "model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
        "tools", "tool_choice", "metadata", "output_config", "thinking", "service_tier",
    }
)
THOUGHT = "The user wants a reply."
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


COUNT_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"})


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer: words, and 4 for each message's framing."""
    system = body.get("system")
    return sum(len(_words(_text(m["content"]))) + 4 for m in body["messages"]) + (len(_words(_text(system))) if system else 0)


def problem(body: Any) -> str | None:
    """What the real API would refuse in this body, or None."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    extra = sorted(set(body) - TOP_LEVEL)
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    if isinstance(body.get("temperature"), (int, float)) and body["temperature"] > 1:
        return "temperature: Input should be less than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        blocks = message["content"] if isinstance(message.get("content"), list) else []
        if role == "user":
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if pending - answered:
                return f"messages.{i}: tool_use ids were found without tool_result blocks immediately after: {sorted(pending - answered)[0]}"
        if pending and role == "assistant":
            return f"messages.{i}: tool_use ids were found without tool_result blocks immediately after"
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"} if role == "assistant" else set()
    return None


class FakeAnthropicUpstream:
    def __init__(self, *, cached_tokens: int = 0) -> None:
        self.cached_tokens = cached_tokens
        self.requests: list[Received] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        self.requests.clear()

    async def start(self) -> FakeAnthropicUpstream:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(Received(request.method, request.path, {k.lower(): v for k, v in request.headers.items()}, raw, body))
        if not request.headers.get("x-api-key"):
            return error(401, "x-api-key header is required")
        if not request.headers.get("anthropic-version"):
            return error(400, "anthropic-version: header is required")
        wrong = problem(body)
        if wrong:
            return error(400, wrong)
        _, _, spec = str(body.get("model", "")).partition("@")
        behaviour = Behaviour.parse(spec) if spec else Behaviour.ok()
        if behaviour.kind == "status":
            return error(behaviour.status, f"fake upstream error {behaviour.status}", dict(behaviour.headers))
        message, blocks = self._answer(body)
        if not body.get("stream"):
            message["content"] = [b for b, _ in blocks]
            return web.json_response(message)
        return await self._stream(request, message, blocks, behaviour)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        """The prompt tokens /v1/messages would report for the same body; as strict about fields."""
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(Received(request.method, request.path, {k.lower(): v for k, v in request.headers.items()}, raw, body))
        if not request.headers.get("x-api-key"):
            return error(401, "x-api-key header is required")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object")
        extra = sorted(set(body) - COUNT_FIELDS)
        if extra:
            return error(400, f"{extra[0]}: Extra inputs are not permitted")
        wrong = problem({**body, "max_tokens": 1})
        if wrong:
            return error(400, wrong)
        return web.json_response({"input_tokens": prompt_tokens(body)})

    def _answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[dict[str, Any], list[str]]]]:
        """The message (without content) and its blocks, each with the pieces it streams in."""
        messages = body["messages"]
        prompt = prompt_tokens(body)
        cached = min(self.cached_tokens, prompt)
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {"type": "auto"}
        stop_reason, stop_sequence = "end_turn", None
        if tools and choice.get("type") != "none":
            tool = next((t for t in tools if t["name"] == choice.get("name")), tools[0])
            args = json.dumps(_sample_arguments(tool.get("input_schema")))
            block = {"type": "tool_use", "id": f"toolu_fake{next(self._ids):06d}", "name": tool["name"], "input": json.loads(args)}
            blocks = [(block, [""] + [args[k : k + 7] for k in range(0, len(args), 7)])]
            stop_reason, output = "tool_use", max(1, len(args) // 4)
        else:
            last = next((m for m in reversed(messages) if m["role"] == "user" and _text(m["content"])), {"content": ""})
            text = REPLY_PREFIX + _text(last["content"])
            found = [(text.find(s), s) for s in body.get("stop_sequences") or () if s in text]
            if found:
                cut, stop_sequence = min(found)
                text, stop_reason = text[:cut], "stop_sequence"
            tokens = _words(text)
            if len(tokens) > body["max_tokens"]:
                tokens, stop_reason, stop_sequence = tokens[: body["max_tokens"]], "max_tokens", None
            blocks = [({"type": "text", "text": "".join(tokens)}, tokens)]
            output = len(tokens)
        if (body.get("thinking") or {}).get("type") == "enabled":
            thought = {"type": "thinking", "thinking": THOUGHT, "signature": f"sig-fake-{len(messages)}"}
            blocks.insert(0, (thought, _words(THOUGHT)))
            output += len(_words(THOUGHT))
        message = {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": {
                "input_tokens": prompt - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": output,
                "service_tier": "standard",
            },
        }
        return message, blocks

    async def _stream(
        self, request: web.Request, message: dict[str, Any], blocks: list[tuple[dict[str, Any], list[str]]], behaviour: Behaviour
    ) -> web.StreamResponse:
        usage = message["usage"]
        start = {**message, "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
        for index, (block, pieces) in enumerate(blocks):
            kind = block["type"]
            empty = {"tool_use": {**block, "input": {}}, "thinking": {**block, "thinking": "", "signature": ""}}.get(kind, {**block, "text": ""})
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}))
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            for piece in pieces:
                delta = {
                    "tool_use": {"type": "input_json_delta", "partial_json": piece},
                    "thinking": {"type": "thinking_delta", "thinking": piece},
                }.get(kind, {"type": "text_delta", "text": piece})
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
            if kind == "thinking":
                signature = {"type": "signature_delta", "signature": block["signature"]}
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": signature}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        final = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
        events.append(("message_delta", {"type": "message_delta", "delta": final, "usage": {"output_tokens": usage["output_tokens"]}}))
        events.append(("message_stop", {"type": "message_stop"}))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"})
        await resp.prepare(request)
        for i, (name, data) in enumerate(events):
            if i == behaviour.after and behaviour.kind == "cut":
                _hang_up(request)
                return resp
            if i == behaviour.after and behaviour.kind == "error-event":
                overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                await resp.write(b"event: error\ndata: " + json.dumps(overloaded).encode() + b"\n\n")
                await resp.write_eof()
                return resp
            await resp.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        await resp.write_eof()
        return resp
