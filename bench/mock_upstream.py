"""A fast mock OpenAI upstream for benchmarks: a raw ASGI app with pre-built bodies.

    python bench/mock_upstream.py --port 9001

`POST /v1/chat/completions` answers a ~320-byte completion with usage, or, when the body asks
for `"stream": true`, a stream of `--chunks` `chat.completion.chunk` events (plus a usage-only
chunk when `stream_options.include_usage` is set, as OpenAI does) and `data: [DONE]`, with no
delay between chunks. `GET /v1/models` lists `mock-model`. Everything else is 404.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

MODEL = "mock-model"
CREATED = 1700000000
ID = "chatcmpl-bench7f3a9c2e4b1d8a6f0c5e3b2a"

_STREAM = re.compile(rb'"stream"\s*:\s*true')
_USAGE = re.compile(rb'"include_usage"\s*:\s*true')


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


COMPLETION = _json(
    {
        "id": ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(12, 9),
    }
)


def stream_events(chunks: int, include_usage: bool) -> list[bytes]:
    def chunk(delta: dict[str, str], finish: str | None) -> dict[str, Any]:
        return {
            "id": ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    objs = [chunk({"role": "assistant", "content": ""}, None)]
    objs += [chunk({"content": f" tok{i}"}, None) for i in range(1, chunks - 1)]
    objs.append(chunk({}, "stop"))
    if include_usage:
        objs.append({**chunk({}, None), "choices": [], "usage": _usage(12, chunks - 2)})
    return [b"data: " + _json(o) + b"\n\n" for o in objs] + [b"data: [DONE]\n\n"]


MODELS = _json({"object": "list", "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "bench"}]})
NOT_FOUND = _json({"error": {"message": "not found", "type": "invalid_request_error", "code": "not_found"}})
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def make_app(chunks: int = 50) -> Any:
    streams = {usage: stream_events(chunks, usage) for usage in (False, True)}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        path, method = scope["path"], scope["method"]
        if method == "POST" and path.endswith("/chat/completions"):
            if _STREAM.search(body):
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                for event in streams[_USAGE.search(body) is not None]:
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                return
            status, headers, payload = 200, JSON_HEADERS, COMPLETION
        elif method == "GET" and path.endswith("/models"):
            status, headers, payload = 200, JSON_HEADERS, MODELS
        else:
            status, headers, payload = 404, JSON_HEADERS, NOT_FOUND
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9001)
    parser.add_argument("--chunks", type=int, default=50, help="content chunks per stream (default 50)")
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.chunks),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
