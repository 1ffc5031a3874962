"""A fake OpenAI-compatible upstream: a real aiohttp server on loopback speaking OpenAI's wire format.

Serves ``/v1/chat/completions`` (JSON and SSE, with tool-call deltas and logprobs),
``/v1/completions`` (legacy, with logprobs), ``/v1/embeddings`` (float and base64), ``/v1/models``
and ``/v1/responses`` (the Responses API itself, stateless: `tests.fakes.responses_upstream`).
Answers are deterministic: chat echoes the last user message ("You said: ..."), completions continue
with " Once upon a time.", embeddings are derived from a hash of the input.

Faults are chosen per request, first from a per-model script, then from the model id itself:
an upstream model ``"name@<spec>"`` always behaves as ``<spec>``::

    status:500                       answer 500 with an OpenAI error body
    status:429;retry-after=1         answer 429 with the header Retry-After: 1
    reset                            reset the connection before any response
    slow:1.5                         wait 1.5 s before the response headers
    slow-stream:1.5                  send the stream's headers, then wait 1.5 s before the first event
    cut:2                            send 2 events (or half the JSON body), then close the connection
    error-event:2                    send 2 events, then an OpenAI error event, then close without [DONE]
    end-early:2                      send 2 events, then end the HTTP response cleanly, without [DONE]
    invalid-json                     answer 200 with a body (or first event) that is not JSON

``upstream.script("m", Behaviour.status(500), Behaviour.status(500))`` makes the next two requests
for model ``m`` fail, after which it falls back to the model id's behaviour ("fail N times then
succeed"). Every request is recorded in ``upstream.requests`` so tests can check what the upstream saw.

``faults=[(0.2, Behaviour.status(500)), (0.05, Behaviour.reset())]`` (``--fault 0.2=status:500``)
gives every other request a random fault with those shares (seeded: ``seed``); ``GET /_faults``
counts what was injected, by kind.

``tool_fault`` (a callable given each chat request body that gets a tool call) may break that call:
it returns ``"bad_json"`` (arguments cut in half), ``"unknown_name"`` (an undeclared name) or None.

``vllm_stop_reason=True`` adds vLLM's ``stop_reason`` to each finished choice: the stop sequence that
matched, or null. ``reasoning="..."`` gives text answers that reasoning text as ``reasoning_content``
(streamed word by word before the content), as llama.cpp and vLLM do for reasoning models.

``llamacpp_quirks=True`` reproduces llama-server: an assistant message with neither ``content`` nor
``tool_calls`` gets a 400, a ``tool_choice`` that is not a string is ignored (as "auto"), and
tool-call ids lack OpenAI's ``call_``.

Usage (in any running loop)::

    async with FakeOpenAIUpstream() as upstream:
        base_url = upstream.url   # http://127.0.0.1:<port>/v1

or ``python -m tests.fakes.openai_upstream --port 9100`` for the bench.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import math
import random
import socket
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

REPLY_PREFIX = "You said: "
COMPLETION_TEXT = [" Once", " upon", " a", " time", "."]
JSON_REPLY = ['{"', "answer", '":', ' "', "ok", '"}']
FINGERPRINT = "fp_fake0001"


@dataclass(frozen=True)
class Behaviour:
    kind: str = "ok"
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    after: int = 2

    @classmethod
    def ok(cls) -> Behaviour:
        return cls()

    @classmethod
    def error(cls, status: int, headers: Mapping[str, str] | None = None) -> Behaviour:
        return cls("status", status=status, headers=dict(headers or {}))

    @classmethod
    def reset(cls) -> Behaviour:
        return cls("reset")

    @classmethod
    def slow(cls, delay: float) -> Behaviour:
        return cls("slow", delay=delay)

    @classmethod
    def slow_stream(cls, delay: float) -> Behaviour:
        return cls("slow-stream", delay=delay)

    @classmethod
    def cut(cls, after: int = 2) -> Behaviour:
        return cls("cut", after=after)

    @classmethod
    def error_event(cls, after: int = 2) -> Behaviour:
        return cls("error-event", after=after)

    @classmethod
    def end_early(cls, after: int = 2) -> Behaviour:
        return cls("end-early", after=after)

    @classmethod
    def invalid_json(cls) -> Behaviour:
        return cls("invalid-json")

    @classmethod
    def parse(cls, spec: str) -> Behaviour:
        """``"status:429;retry-after=1"``, ``"slow:1.5"``, ``"cut:2"``, ``"reset"``..."""
        head, *pairs = spec.split(";")
        name, _, arg = head.partition(":")
        headers = dict(pair.split("=", 1) for pair in pairs)
        if name == "ok":
            return cls.ok()
        if name == "status":
            return cls.error(int(arg or 500), headers)
        if name in ("slow", "slow-stream"):
            return cls(name, delay=float(arg or 1.0))
        if name in ("cut", "error-event", "end-early"):
            return cls(name, after=int(arg or 2))
        if name in ("reset", "invalid-json"):
            return cls(name)
        raise ValueError(f"unknown fake upstream behaviour {spec!r}")


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any  # the decoded JSON, or None

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None


class FakeOpenAIUpstream:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        llamacpp_quirks: bool = False,
        cached_tokens: int = 0,
        chunk_delay: float = 0.0,
        tool_fault: Callable[[dict[str, Any]], str | None] | None = None,
        faults: Sequence[tuple[float, Behaviour]] = (),
        seed: int = 0,
        keep_requests: bool = True,
        vllm_stop_reason: bool = False,
        reasoning: str | None = None,
    ) -> None:
        self.tool_fault = tool_fault
        self.vllm_stop_reason = vllm_stop_reason
        self.reasoning = reasoning
        assert sum(share for share, _ in faults) <= 1.0, "fault shares add up to more than 1"
        self.faults = list(faults)
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        # A long load run (the fault drill) keeps no record of each request.
        self.keep_requests = keep_requests
        self.host = host
        self.port = port
        self.llamacpp_quirks = llamacpp_quirks
        # Reported as usage.prompt_tokens_details.cached_tokens (capped at prompt_tokens).
        self.cached_tokens = cached_tokens
        # Seconds between stream events.
        self.chunk_delay = chunk_delay
        self.requests: list[Received] = []
        self._scripts: dict[str, deque[Behaviour]] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None

    # -- control ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def script(self, model: str, *behaviours: Behaviour) -> None:
        """The next requests for `model` behave as given, in order; then as the model id says."""
        self._scripts.setdefault(model, deque()).extend(behaviours)

    def fail_times(self, model: str, n: int, status: int = 500) -> None:
        self.script(model, *[Behaviour.error(status)] * n)

    def requests_for(self, model: str) -> list[Received]:
        return [r for r in self.requests if r.model == model]

    def reset(self) -> None:
        self.requests.clear()
        self._scripts.clear()

    def behaviour_for(self, model: str | None) -> Behaviour:
        model = model or ""
        script = self._scripts.get(model)
        if script:
            return script.popleft()
        _, sep, spec = model.partition("@")
        if sep:
            return Behaviour.parse(spec)
        if self.faults:
            roll = self._rng.random()
            for share, behaviour in self.faults:
                if roll < share:
                    self.injected[behaviour.kind] += 1
                    return behaviour
                roll -= share
        return Behaviour.ok()

    # -- lifecycle ----------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/_faults", self._faults)
        return app

    async def start(self) -> FakeOpenAIUpstream:
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        try:
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            sock.close()
            raise
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers -----------------------------------------------------------------

    async def _receive(self, request: web.Request) -> Received:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        received = Received(request.method, request.path, {k.lower(): v for k, v in request.headers.items()}, raw, body)
        if self.keep_requests:
            self.requests.append(received)
        return received

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        body = received.body
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        if self.llamacpp_quirks and any(
            isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None and not m.get("tool_calls")
            for m in body.get("messages") or ()
        ):
            return _error(400, "Assistant message must contain either 'content' or 'tool_calls'!", "invalid_request_error")
        return await self._serve(request, body, _ChatAnswer(body, self))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        from tests.fakes.responses_upstream import serve_responses  # it builds on this module

        return await serve_responses(self, request)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        if not isinstance(received.body, dict):
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        return await self._serve(request, received.body, _CompletionAnswer(received.body, self))

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        received = await self._receive(request)
        body = received.body
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        return await self._serve(request, body, _EmbeddingAnswer(body, self))

    async def _faults(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.injected))

    async def _models(self, request: web.Request) -> web.Response:
        await self._receive(request)
        return web.json_response({"object": "list", "data": []})

    async def _serve(self, request: web.Request, body: dict[str, Any], answer: _Answer) -> web.StreamResponse:
        behaviour = self.behaviour_for(body.get("model"))
        kind = behaviour.kind
        if kind == "status":
            return _error(behaviour.status, f"fake upstream error {behaviour.status}", headers=behaviour.headers)
        if kind == "reset":
            _reset(request)
            return web.Response()
        if kind == "slow":
            await asyncio.sleep(behaviour.delay)
        stream = bool(body.get("stream"))
        if not stream:
            return await self._respond_json(request, answer, behaviour)
        return await self._respond_stream(request, answer, behaviour)

    async def _respond_json(self, request: web.Request, answer: _Answer, behaviour: Behaviour) -> web.StreamResponse:
        if behaviour.kind == "invalid-json":
            return web.Response(body=b'{"id": "chatcmpl-broken", "choices": [', content_type="application/json")
        data = json.dumps(answer.complete()).encode()
        if behaviour.kind in ("cut", "error-event", "end-early"):
            # Promise the whole body, send part of it, then drop the connection.
            resp = web.StreamResponse(headers={"content-type": "application/json", "content-length": str(len(data))})
            await resp.prepare(request)
            await resp.write(data[: len(data) // 2])
            _hang_up(request)
            return resp
        return web.Response(body=data, content_type="application/json")

    async def _respond_stream(self, request: web.Request, answer: _Answer, behaviour: Behaviour) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await resp.prepare(request)
        if behaviour.kind == "slow-stream":
            await asyncio.sleep(behaviour.delay)
        if behaviour.kind == "invalid-json":
            await resp.write(b"data: {not json\n\n")
            await resp.write_eof()
            return resp
        for i, event in enumerate(answer.stream()):
            if behaviour.kind in ("cut", "error-event", "end-early") and i == behaviour.after:
                if behaviour.kind == "cut":
                    _hang_up(request)
                    return resp
                if behaviour.kind == "error-event":
                    error = {
                        "error": {
                            "message": "fake upstream failed mid-stream",
                            "type": "server_error",
                            "param": None,
                            "code": "internal_error",
                        }
                    }
                    await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
                await resp.write_eof()
                return resp
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}-fake{next(self._ids):06d}"


def _error(
    status: int, message: str, error_type: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    if error_type is None:
        error_type = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            404: "invalid_request_error",
            429: "rate_limit_error",
        }.get(status, "server_error")
    code = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}.get(status)
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _hang_up(request: web.Request) -> None:
    """Close the connection mid-answer (what was sent still arrives, then EOF), as a dying upstream would."""
    if request.transport is not None:
        request.transport.close()


def _reset(request: web.Request) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), as a crashing upstream would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


# -- answers ---------------------------------------------------------------------------


def _usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt_tokens), "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _words(text: str) -> list[str]:
    """Split into word tokens that keep their leading space (" world")."""
    tokens: list[str] = []
    for i, word in enumerate(text.split(" ")):
        tokens.append(word if i == 0 else " " + word)
    return [t for t in tokens if t]


def _logprob(position: int, rank: int) -> float:
    return round(-0.05 * (position + 1) - 1.5 * rank, 4)


def _chat_logprob(token: str, position: int, top: int) -> dict[str, Any]:
    alternatives = [token] + [f"{token.strip() or '_'}#{k}" for k in range(1, top)]
    return {
        "token": token,
        "logprob": _logprob(position, 0),
        "bytes": list(token.encode()),
        "top_logprobs": [
            {"token": alt, "logprob": _logprob(position, k), "bytes": list(alt.encode())}
            for k, alt in enumerate(alternatives[:top])
        ],
    }


class _Answer:
    def complete(self) -> dict[str, Any]:
        raise NotImplementedError

    def stream(self) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


def _truncate(tokens: list[str], body: dict[str, Any], default_finish: str) -> tuple[list[str], str]:
    """Apply `stop` and `max_tokens`; return the tokens kept and the finish reason."""
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    text = "".join(tokens)
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    finish = default_finish
    if cut >= 0:
        kept, size = [], 0
        for t in tokens:
            if size + len(t) > cut:
                if cut > size:
                    kept.append(t[: cut - size])
                break
            kept.append(t)
            size += len(t)
        tokens, finish = kept, "stop"
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and len(tokens) > limit:
        tokens, finish = tokens[:limit], "length"
    return tokens, finish


def _matched_stop(tokens: list[str], body: dict[str, Any]) -> str | None:
    """The stop sequence `_truncate` cut at (the earliest), as vLLM reports it."""
    stop = body.get("stop")
    text = "".join(tokens)
    found = [(text.find(s), s) for s in ([stop] if isinstance(stop, str) else list(stop or [])) if s and s in text]
    return min(found)[1] if found else None


def _sample_arguments(parameters: Any) -> dict[str, Any]:
    """Arguments matching a JSON schema's properties: enums take their first value."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    out: dict[str, Any] = {}
    for name, schema in (props or {}).items():
        schema = schema if isinstance(schema, dict) else {}
        if schema.get("enum"):
            out[name] = schema["enum"][0]
            continue
        out[name] = {
            "string": f"{name}-value",
            "integer": 1,
            "number": 1.5,
            "boolean": True,
            "array": [],
            "object": {},
        }.get(schema.get("type", "string"), f"{name}-value")
    return out


class _ChatAnswer(_Answer):
    def __init__(self, body: dict[str, Any], upstream: FakeOpenAIUpstream) -> None:
        self.body = body
        self.up = upstream
        self.id = upstream._next_id("chatcmpl")
        self.created = int(time.time())
        self.model = body.get("model")
        self.n = body.get("n") or 1
        self.tool = self._chosen_tool()
        self.fault = upstream.tool_fault(body) if upstream.tool_fault and self.tool is not None else None
        messages = body.get("messages") or []
        self.prompt_tokens = sum(len(_words(_content_text(m))) + 4 for m in messages if isinstance(m, dict))
        fmt = (body.get("response_format") or {}).get("type")
        if self.tool is not None:
            self.tokens, self.finish = [], "tool_calls"
        elif fmt in ("json_object", "json_schema"):
            self.tokens, self.finish = _truncate(list(JSON_REPLY), body, "stop")
        else:
            last_user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), {})
            self.tokens, self.finish = _truncate(_words(REPLY_PREFIX + _content_text(last_user)), body, "stop")
            self.matched_stop = _matched_stop(_words(REPLY_PREFIX + _content_text(last_user)), body)
        if self.tool is not None or fmt in ("json_object", "json_schema") or self.finish != "stop":
            self.matched_stop = None
        self.top = body.get("top_logprobs") or 0
        self.logprobs = bool(body.get("logprobs"))

    def _chosen_tool(self) -> dict[str, Any] | None:
        tools = self.body.get("tools") or []
        choice = self.body.get("tool_choice", "auto")
        if not tools or choice == "none":
            return None
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            return next((t["function"] for t in tools if t["function"].get("name") == wanted), tools[0]["function"])
        return tools[0]["function"]

    def _arguments(self) -> str:
        args = json.dumps(_sample_arguments(self.tool.get("parameters") if self.tool else None))
        return args[: len(args) // 2] if self.fault == "bad_json" else args

    def _name(self) -> str:
        assert self.tool is not None
        return self.tool["name"] + ("_v2" if self.fault == "unknown_name" else "")

    def _call_id(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.id}/{index}".encode()).hexdigest()
        # llama-server's are 32 random letters and digits, without OpenAI's `call_`.
        return digest[:32] if self.up.llamacpp_quirks else f"call_{digest[:24]}"

    def _completion_tokens(self) -> int:
        per_choice = len(self.tokens) if self.tool is None else max(1, math.ceil(len(self._arguments()) / 4))
        return per_choice * self.n

    def _base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "system_fingerprint": FINGERPRINT,
        }

    def complete(self) -> dict[str, Any]:
        choices = []
        for i in range(self.n):
            message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
            if self.tool is not None:
                message["tool_calls"] = [
                    {
                        "id": self._call_id(i),
                        "type": "function",
                        "function": {"name": self._name(), "arguments": self._arguments()},
                    }
                ]
            else:
                message["content"] = "".join(self.tokens)
                if self.up.reasoning:
                    message["reasoning_content"] = self.up.reasoning
            logprobs = None
            if self.logprobs and self.tool is None:
                logprobs = {
                    "content": [_chat_logprob(t, p, self.top) for p, t in enumerate(self.tokens)],
                    "refusal": None,
                }
            choices.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": self.finish})
            if self.up.vllm_stop_reason:
                choices[-1]["stop_reason"] = self.matched_stop
        out = self._base("chat.completion")
        out["choices"] = choices
        out["usage"] = _usage(self.prompt_tokens, self._completion_tokens(), self.up.cached_tokens)
        return out

    def _chunk(
        self, index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None
    ) -> dict[str, Any]:
        out = self._base("chat.completion.chunk")
        out["choices"] = [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]
        if self.wants_usage:
            out["usage"] = None
        return out

    @property
    def wants_usage(self) -> bool:
        return bool((self.body.get("stream_options") or {}).get("include_usage"))

    def stream(self) -> Iterator[dict[str, Any]]:
        for i in range(self.n):
            first: dict[str, Any] = {"role": "assistant", "content": "" if self.tool is None else None, "refusal": None}
            if self.tool is not None:
                first["tool_calls"] = [
                    {
                        "index": 0,
                        "id": self._call_id(i),
                        "type": "function",
                        "function": {"name": self._name(), "arguments": ""},
                    }
                ]
            yield self._chunk(i, first)
        if self.tool is not None:
            args = self._arguments()
            fragments = [args[k : k + 7] for k in range(0, len(args), 7)]
            for fragment in fragments:
                for i in range(self.n):
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": fragment}}
                    yield self._chunk(i, {"tool_calls": [call]})
        else:
            for word in _words(self.up.reasoning or ""):
                for i in range(self.n):
                    yield self._chunk(i, {"reasoning_content": word})
            for p, token in enumerate(self.tokens):
                for i in range(self.n):
                    logprobs = None
                    if self.logprobs:
                        logprobs = {"content": [_chat_logprob(token, p, self.top)], "refusal": None}
                    yield self._chunk(i, {"content": token}, logprobs=logprobs)
        for i in range(self.n):
            last = self._chunk(i, {}, self.finish)
            if self.up.vllm_stop_reason:
                last["choices"][0]["stop_reason"] = self.matched_stop
            yield last
        if self.wants_usage:
            out = self._base("chat.completion.chunk")
            out["choices"] = []
            out["usage"] = _usage(self.prompt_tokens, self._completion_tokens(), self.up.cached_tokens)
            yield out


def _content_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class _CompletionAnswer(_Answer):
    def __init__(self, body: dict[str, Any], upstream: FakeOpenAIUpstream) -> None:
        self.body = body
        self.up = upstream
        self.id = upstream._next_id("cmpl")
        self.created = int(time.time())
        prompt = body.get("prompt")
        self.prompts = (
            [prompt] if isinstance(prompt, str) else [p if isinstance(p, str) else "<tokens>" for p in prompt or []]
        )
        if prompt and not isinstance(prompt, str) and all(isinstance(t, int) for t in prompt):
            self.prompts = ["<tokens>"]
        self.n = body.get("n") or 1
        self.tokens, self.finish = _truncate(list(COMPLETION_TEXT), body, "stop")
        self.logprobs = body.get("logprobs")
        self.prompt_tokens = sum(len(_words(p)) for p in self.prompts)

    def _logprobs(self, tokens: list[str], offset: int) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        top = int(self.logprobs)
        offsets, pos = [], offset
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        return {
            "tokens": tokens,
            "token_logprobs": [_logprob(p, 0) for p in range(len(tokens))],
            "top_logprobs": [
                {alt: _logprob(p, k) for k, alt in enumerate([t] + [f"{t.strip()}#{k}" for k in range(1, top)])}
                if top
                else None
                for p, t in enumerate(tokens)
            ],
            "text_offset": offsets,
        }

    def _text(self, prompt: str) -> str:
        return (prompt if self.body.get("echo") else "") + "".join(self.tokens)

    def _base(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.body.get("model"),
            "system_fingerprint": FINGERPRINT,
        }

    def complete(self) -> dict[str, Any]:
        choices = []
        for p, prompt in enumerate(self.prompts):
            for k in range(self.n):
                choices.append(
                    {
                        "text": self._text(prompt),
                        "index": p * self.n + k,
                        "logprobs": self._logprobs(self.tokens, len(prompt) if self.body.get("echo") else 0),
                        "finish_reason": self.finish,
                    }
                )
        out = self._base()
        out["choices"] = choices
        out["usage"] = _usage(self.prompt_tokens, len(self.tokens) * len(choices), self.up.cached_tokens)
        return out

    def stream(self) -> Iterator[dict[str, Any]]:
        wants_usage = bool((self.body.get("stream_options") or {}).get("include_usage"))
        count = len(self.prompts) * self.n
        for p, token in enumerate(self.tokens):
            for index in range(count):
                out = self._base()
                logprobs = self._logprobs([token], 0)
                if logprobs is not None:
                    logprobs["token_logprobs"] = [_logprob(p, 0)]
                out["choices"] = [{"text": token, "index": index, "logprobs": logprobs, "finish_reason": None}]
                if wants_usage:
                    out["usage"] = None
                yield out
        for index in range(count):
            out = self._base()
            out["choices"] = [{"text": "", "index": index, "logprobs": None, "finish_reason": self.finish}]
            if wants_usage:
                out["usage"] = None
            yield out
        if wants_usage:
            out = self._base()
            out["choices"] = []
            out["usage"] = _usage(self.prompt_tokens, len(self.tokens) * count, self.up.cached_tokens)
            yield out


def embedding_for(text: str, dimensions: int = 8) -> list[float]:
    """The fake's deterministic embedding of `text` (float32-exact values)."""
    digest = hashlib.sha256(text.encode()).digest()
    while len(digest) < dimensions:
        digest += hashlib.sha256(digest).digest()
    return [struct.unpack("<f", struct.pack("<f", (b - 128) / 128))[0] for b in digest[:dimensions]]


class _EmbeddingAnswer(_Answer):
    def __init__(self, body: dict[str, Any], upstream: FakeOpenAIUpstream) -> None:
        self.body = body
        self.up = upstream

    def complete(self) -> dict[str, Any]:
        value = self.body.get("input")
        inputs = [value] if isinstance(value, str) else list(value or [])
        texts = [v if isinstance(v, str) else json.dumps(v) for v in inputs]
        dims = self.body.get("dimensions") or 8
        data = []
        for i, text in enumerate(texts):
            vector = embedding_for(text, dims)
            if self.body.get("encoding_format") == "base64":
                encoded: Any = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            else:
                encoded = vector
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(len(_words(t)) for t in texts)
        return {
            "object": "list",
            "data": data,
            "model": self.body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def stream(self) -> Iterator[dict[str, Any]]:
        raise ValueError("embeddings do not stream")


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the fake OpenAI-compatible upstream.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--llamacpp-quirks", action="store_true")
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--fault", action="append", default=[], metavar="SHARE=SPEC",
                        help="a random fault for this share of requests, e.g. 0.2=status:500 (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    faults = [(float(share), Behaviour.parse(spec)) for share, spec in (f.split("=", 1) for f in args.fault)]

    async def serve() -> None:
        async with FakeOpenAIUpstream(
            host=args.host, port=args.port, llamacpp_quirks=args.llamacpp_quirks, chunk_delay=args.chunk_delay,
            faults=faults, seed=args.seed, keep_requests=False,
        ) as upstream:
            print(f"fake upstream on {upstream.url}", flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
