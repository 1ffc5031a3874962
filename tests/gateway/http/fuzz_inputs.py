"""What the /v1 fuzz test sends and what its garbage upstream answers, decoded from the bytes
hypothesis generates (structure-aware fuzzing, as libFuzzer's FuzzedDataProvider does it).

Hypothesis draws one byte string per example (about 2 ms on a loaded 2-core VM, where composite
strategies cost about 17 ms: 10,000 examples must fit in CI) and `Choices` turns it into
decisions. A zero byte, or running out of bytes, always picks the simplest option, so when
hypothesis shrinks a failing byte string toward zeros the request it decodes to shrinks too.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.garbage_upstream import Garbage

KEY = "sk-fuzz-key-000000000001"
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MODELS = ("chat", "fallback", "all-fail", "rate-limited", "cut", "invalid", "embed", "nope", "", "chat\u00e9")
# Characters a client may put in JSON strings: ASCII first, then the awkward ones.
ALPHABET = "abc xyz019_-./:{}[]\"\\\n\t\u00e9\u00ff\u0100\u4e2d\U0001f600\u202e\x00\x1f\ud800"
HEADER_ALPHABET = "abcXYZ019 -_.,;=:/\"'\t\u00e9\u00ff"
STRANGE_NUMBERS: tuple[Any, ...] = (0, 1, 2, -1, 10**6, 2**31, 2**63 - 1, 2**64, 10**17, 10**30, 0.5, -0.5, 1e300, -1e300, 1e-300)
ROLES = ("user", "system", "assistant", "tool", "developer", "function", "", "root")
RETRY_AFTERS = (
    "1", "inf", "-inf", "nan", "Infinity", "1e400", "1.8e305", "2e305", "1e306", "99999999999999999999", "-1", "0",
    "0.001", "abc", "", " 3 ", "Wed, 21 Oct 2015 07:28:00 GMT", "Wed, 21 Oct 2015 07:28:00 -0000",
    "Fri, 31 Dec 9999 23:59:59 GMT", "\u0661\u0662",
)
HUGE_NUMBERS = (b"5", b"1e400", b"-1e400", b"123456789012345678901234567890", b"100000000000000000", b"1e17", b"-5",
                b"1.5", b'"12"', b"null", b"[]", b"{}", b"true", b"NaN", b"Infinity")
UPSTREAM_STATUSES = (200, 200, 200, 200, 201, 204, 400, 401, 403, 404, 408, 409, 413, 422, 429, 429, 500, 502, 503, 504, 520, 599)


class Choices:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._i = 0

    def byte(self) -> int:
        i = self._i
        self._i += 1
        return self._data[i] if i < len(self._data) else 0

    def below(self, n: int) -> int:
        """0 .. n-1 (two bytes when n is large)."""
        if n <= 256:
            return self.byte() % n
        return (self.byte() << 8 | self.byte()) % n

    def pick(self, options: Any) -> Any:
        return options[self.below(len(options))]

    def maybe(self) -> bool:
        return self.byte() % 2 == 1

    def text(self, max_len: int = 12, alphabet: str = ALPHABET) -> str:
        return "".join(alphabet[self.below(len(alphabet))] for _ in range(self.below(max_len + 1)))

    def number(self) -> Any:
        kind = self.below(3)
        if kind == 0:
            return self.below(300)
        if kind == 1:
            return self.pick(STRANGE_NUMBERS)
        return (self.below(2001) - 1000) / 100

    def value(self, depth: int = 2) -> Any:
        """Any JSON value, small."""
        kind = self.below(7 if depth > 0 else 5)
        if kind == 0:
            return None
        if kind == 1:
            return self.maybe()
        if kind == 2:
            return self.number()
        if kind == 3:
            return self.text()
        if kind == 4:
            return self.pick(STRANGE_NUMBERS)
        if kind == 5:
            return [self.value(depth - 1) for _ in range(self.below(4))]
        return {self.text(6): self.value(depth - 1) for _ in range(self.below(4))}


def dumps(value: Any) -> bytes:
    """JSON as a client may send it: integers past 64 bits, lone surrogates escaped."""
    return json.dumps(value).encode()


# -- client requests ---------------------------------------------------------------------


def content(c: Choices) -> Any:
    kind = c.below(4)
    if kind == 0:
        return c.text(30)
    if kind == 1:
        parts = []
        for _ in range(c.below(3)):
            part: dict[str, Any] = {"type": c.pick(("text", "image_url", "input_audio", "x", 5))}
            if c.maybe():
                part["text"] = c.text() if c.maybe() else c.value(1)
            if c.maybe():
                part["image_url"] = c.value(1)
            parts.append(part)
        return parts
    return c.value()


def message(c: Choices) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": c.pick(ROLES) if c.below(4) else c.value(0)}
    if c.below(5):
        msg["content"] = content(c)
    for name in ("name", "tool_calls", "tool_call_id"):
        if c.below(6) == 5:
            msg[name] = c.value(1)
    return msg


def tools(c: Choices) -> Any:
    if c.below(3) == 0:
        return c.value()
    out = []
    for _ in range(c.below(3)):
        tool: dict[str, Any] = {"type": c.pick(("function", "x"))}
        if c.below(4):
            fn: dict[str, Any] = {"name": c.text(10) if c.maybe() else c.value(0)}
            if c.maybe():
                fn["parameters"] = c.value() if c.maybe() else {"type": "object", "properties": {c.text(5): {"type": c.pick(("string", "integer", "x"))}}}
            tool["function"] = fn
        out.append(tool)
    return out


FIELDS: dict[str, Any] = {
    "messages": lambda c: [message(c) for _ in range(c.below(4))] if c.below(4) else c.value(),
    "prompt": lambda c: c.text(30) if c.maybe() else c.value(),
    "input": lambda c: c.text(30) if c.maybe() else c.value(),
    "stream": lambda c: c.maybe() if c.below(4) else c.value(0),
    "stream_options": lambda c: {"include_usage": c.maybe()} if c.maybe() else c.value(),
    "max_tokens": Choices.number,
    "max_completion_tokens": Choices.number,
    "n": Choices.number,
    "temperature": Choices.number,
    "top_p": Choices.number,
    "logprobs": lambda c: c.maybe() if c.maybe() else c.number(),
    "top_logprobs": Choices.number,
    "stop": lambda c: [c.text(4) for _ in range(c.below(6))] if c.maybe() else c.value(),
    "tools": tools,
    "tool_choice": lambda c: c.pick(("auto", "none", "required")) if c.maybe() else c.value(),
    "response_format": lambda c: {"type": c.pick(("json_object", "text", "json_schema"))} if c.maybe() else c.value(),
    "seed": Choices.number,
    "user": lambda c: c.text() if c.maybe() else c.value(0),
    "encoding_format": lambda c: c.pick(("float", "base64")) if c.maybe() else c.value(0),
    "dimensions": Choices.number,
    "extra_field": Choices.value,
    # the Responses API's own
    "instructions": lambda c: c.text(20) if c.maybe() else c.value(0),
    "text": lambda c: {"format": {"type": c.pick(("text", "json_object", "json_schema")), "name": "x", "schema": c.value(1)}}
    if c.maybe()
    else c.value(),
    "include": lambda c: [c.pick(("message.output_text.logprobs", "x", [], {}, None, 1))] if c.maybe() else c.value(),
    "previous_response_id": lambda c: c.pick(("resp_x", "", "../k")) if c.maybe() else c.value(0),
    "max_output_tokens": Choices.number,
    "store": lambda c: c.maybe() if c.maybe() else c.value(0),
    "metadata": lambda c: {c.text(5): c.text(5)} if c.maybe() else c.value(),
}
EXTRA_FIELDS = tuple(sorted(set(FIELDS) - {"messages", "prompt", "input"}))


def responses_input(c: Choices, text: str) -> Any:
    if c.maybe():
        return text
    items: list[Any] = [{"role": "user", "content": text}]
    for _ in range(c.below(3)):
        kind = c.pick(("message", "function_call", "function_call_output", "reasoning", "x", None))
        item: dict[str, Any] = {"type": kind} if kind else {}
        for name in ("role", "content", "call_id", "name", "arguments", "output"):
            if c.maybe():
                item[name] = c.value(1) if c.below(3) == 0 else (c.pick(ROLES) if name == "role" else c.text(8))
        items.append(item)
    return items


def body(c: Choices, path: str = "") -> bytes:
    kind = c.pick((0, 0, 0, 0, 1, 1, 1, 2, 3, 4))
    if kind == 0:  # a request the gateway takes, with a few generated fields on top
        text = c.text(30)
        out: dict[str, Any] = {"model": c.pick(MODELS[:6]), "messages": [{"role": "user", "content": text}], "prompt": text, "input": text}
        if path == "/v1/responses":  # 'prompt' is a Responses field (templates) that the gateway refuses
            out = {"model": out["model"], "input": responses_input(c, text)}
        for _ in range(c.below(3)):
            name = c.pick(EXTRA_FIELDS)
            out[name] = FIELDS[name](c)
        return dumps(out)
    if kind == 1:  # any fields, any values
        out = {"model": c.pick(MODELS) if c.below(5) else c.value(0)}
        for _ in range(c.below(6)):
            name = c.pick(sorted(FIELDS))
            out[name] = FIELDS[name](c)
        return dumps(out)
    if kind == 2:  # truncated JSON
        whole = dumps({"model": "chat", "messages": [message(c)]})
        return whole[: c.below(len(whole))]
    if kind == 3:  # JSON, not an object
        return dumps(c.value())
    return bytes(c.byte() for _ in range(c.below(64)))  # not even UTF-8


def headers(c: Choices, payload: bytes) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    auth = c.pick(("key",) * 7 + ("none", "other", "other"))
    if auth == "key":
        out.append((b"authorization", f"Bearer {KEY}".encode()))
    elif auth == "other":
        value = c.pick((f"bearer {KEY}", KEY, f"Bearer {KEY}x", "Bearer ", "Basic abc", f"Bearer {c.text(20, HEADER_ALPHABET)}"))
        out.append((b"authorization", value.encode("latin-1")))
    if c.maybe():
        ctype = c.pick(("application/json", "application/json; charset=utf-8", "text/plain", "", "multipart/form-data"))
        out.append((b"content-type", ctype.encode()))
    length = c.pick(("right", "right", "right", "none", "short", "garbage", "huge"))
    if length == "right":
        out.append((b"content-length", str(len(payload)).encode()))
    elif length == "short":
        out.append((b"content-length", str(max(0, len(payload) - 1)).encode()))
    elif length == "garbage":
        out.append((b"content-length", c.text(8, HEADER_ALPHABET).encode("latin-1")))
    elif length == "huge":
        out.append((b"content-length", b"99999999999999999999"))
    if c.maybe():
        out.append((b"x-request-id", c.text(40, HEADER_ALPHABET).encode("latin-1")))
    for _ in range(c.below(3)):
        name = c.pick(("x-session-id", "x-gateway-prefer", "user-agent", "accept", "x-forwarded-for", "openai-organization"))
        out.append((name.encode(), c.text(30, HEADER_ALPHABET).encode("latin-1")))
    return out


def request(data: bytes) -> tuple[str, str, list[tuple[bytes, bytes]], bytes]:
    c = Choices(data)
    if c.below(40) == 39:
        return "GET", c.pick(("/v1/models", "/v1/models/chat", "/v1/chat/completions")), [], b""
    path = c.pick(PATHS)
    payload = body(c, path)
    return "POST", path, headers(c, payload), payload


# -- garbage answers ----------------------------------------------------------------------


def garbage_json(c: Choices) -> bytes:
    kind = c.below(6)
    n = lambda: c.pick(HUGE_NUMBERS)  # noqa: E731
    if kind == 0:  # a completion whose usage is absurd
        return (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",'
                b'"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":' + n() + b',"completion_tokens":'
                + n() + b',"total_tokens":' + n() + b',"prompt_tokens_details":{"cached_tokens":' + n() + b"}}}")
    if kind == 1:  # the right keys with the wrong types
        fields = ("index", "message", "text", "delta", "finish_reason", "logprobs", "embedding")
        return dumps({
            "id": c.value(0), "object": c.value(0), "model": c.value(0),
            "choices": [{c.pick(fields): c.value(1) for _ in range(c.below(4))} for _ in range(c.below(3))] if c.maybe() else c.value(),
            "usage": {c.pick(("prompt_tokens", "completion_tokens", "prompt_tokens_details", "cache_read_input_tokens")): c.value(1) for _ in range(c.below(4))},
            "data": c.value(),
        })
    if kind == 2:
        return dumps(c.value())
    if kind == 3:  # an error body of any shape
        return dumps({"error": c.value(), "detail": c.value(1)})
    if kind == 4:  # cut short
        whole = dumps(c.value())
        return whole[: c.below(len(whole) + 1)] + bytes(c.byte() for _ in range(c.below(8)))
    return bytes(c.byte() for _ in range(c.below(80)))


def sse_event(c: Choices) -> bytes:
    kind = c.below(8)
    if kind == 0:
        return b"data: " + dumps({"id": "x", "object": "chat.completion.chunk", "model": "m",
                                  "choices": [{"index": 0, "delta": {"content": c.text(8)}}]}) + b"\n\n"
    if kind == 1:
        return (b'data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":' + c.pick(HUGE_NUMBERS)
                + b',"completion_tokens":' + c.pick(HUGE_NUMBERS) + b"}}\n\n")
    if kind == 2:
        return b"data: " + garbage_json(c) + b"\n\n"
    if kind == 3:
        return b"data: [DONE]\n\n"
    if kind == 4:
        return b'event: error\ndata: {"error": ' + dumps(c.value()) + b"}\n\n"
    if kind == 5:
        return c.pick((b": ping\n\n", b"\n\n", b"data:\n\n", b"retry: 10\n\n", b"id: 1\r\n\r\n"))
    if kind == 6:
        return b"data: " + dumps({"choices": [{"index": c.value(0), "delta": c.value(1), "finish_reason": c.value(0),
                                               "logprobs": c.value(1)}]}) + b"\r\n\r\n"
    return bytes(c.byte() for _ in range(c.below(40)))


def garbage_answer(c: Choices, first_byte: float, between_chunks: float) -> Garbage:
    headers = []
    if c.maybe():
        headers.append(("retry-after", c.pick(RETRY_AFTERS)))
    if c.below(4) == 3:
        headers.append(("retry-after-ms", c.pick(RETRY_AFTERS)))
    rare = c.below(100)
    if rare == 99:
        return Garbage(reset=True)
    if rare == 98:  # no answer at all: the first-byte timeout
        return Garbage(stall=first_byte * 4)
    status = c.pick(UPSTREAM_STATUSES)
    if c.maybe():
        blob = b"".join(sse_event(c) for _ in range(c.below(7)))
        if c.maybe():  # truncated
            blob = blob[: c.below(len(blob) + 1)]
        pieces = tuple(blob[i : i + 37] for i in range(0, len(blob), 37)) if c.maybe() else (blob,)
        ctype = "text/event-stream"
    else:
        pieces = (garbage_json(c),)
        ctype = c.pick(("application/json", "text/html", "text/event-stream"))
    headers.append(("content-type", ctype))
    return Garbage(
        status=status,
        headers=tuple(headers),
        pieces=pieces,
        close=c.below(5) == 4,
        stall_after=between_chunks * 4 if rare == 97 else 0.0,
    )


def garbage_case(data: bytes, first_byte: float, between_chunks: float) -> tuple[Garbage, str, bytes]:
    c = Choices(data)
    answer = garbage_answer(c, first_byte, between_chunks)
    path = c.pick(PATHS)
    model = "embed" if path == "/v1/embeddings" else c.pick(("one", "two"))
    out: dict[str, Any] = {"model": model, "stream": c.maybe()}
    if path == "/v1/chat/completions":
        out["messages"] = [{"role": "user", "content": "hi"}]
        if c.maybe():
            out["stream_options"] = {"include_usage": True}
        if c.below(4) == 3:
            out["n"] = 2
        if c.below(4) == 3:
            out["logprobs"], out["top_logprobs"] = True, 2
    elif path == "/v1/completions":
        out["prompt"] = "once"
    elif path == "/v1/responses":  # the garbage goes through the Responses translation
        out["input"] = "hi"
        if c.below(4) == 3:
            out["include"], out["top_logprobs"] = ["message.output_text.logprobs"], 2
        if c.below(4) == 3:
            out["tools"] = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    else:
        out = {"model": model, "input": "x"}
    return answer, path, dumps(out)
