"""A gateway app over a fake upstream (`MockHTTPClient`), with persistence on a given database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.config import Settings, load_config
from providers.base import UpstreamRequest
from providers.http_mock import MockResponse

ADMIN_KEY = "sk-admin-0000000001"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
CONFIG_KEY = "sk-config-key-0001"
USER = {"authorization": f"Bearer {CONFIG_KEY}"}
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 100,
    "total_tokens": 1100,
    "prompt_tokens_details": {"cached_tokens": 800},
}
PRICE = {"input": 1.0, "cached_input": 0.25, "output": 4.0}
COST = (200 * 1.0 + 800 * 0.25 + 100 * 4.0) / 1_000_000
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def answer(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    if body["model"] == "up-broken":
        return MockResponse(500, {"content-type": "application/json"}, b'{"error": {"message": "boom"}}')
    if not body.get("stream"):
        return MockResponse(
            200,
            {"content-type": "application/json"},
            orjson.dumps(
                {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [], "usage": USAGE}
            ),
        )
    events = [
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": body["model"],
            "choices": [{"index": 0, "delta": {"content": "hi"}}],
        },
        {"id": "x", "object": "chat.completion.chunk", "model": body["model"], "choices": [], "usage": USAGE},
    ]
    chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)


def settings(
    tmp_path: Path,
    db_url: str | None,
    *,
    keys: bool = True,
    persistence: dict[str, Any] | None = None,
    **overrides: Any,
) -> Settings:
    """Two endpoints of model `m` (p/m works, q/m answers 500) and one of `broken`."""
    config: dict[str, Any] = {
        "auth": {"admin_key": ADMIN_KEY, "keys": [{"name": "config-key", "key": CONFIG_KEY}] if keys else []},
        "providers": [{"name": "p", "base_url": "http://p.test/v1"}, {"name": "q", "base_url": "http://q.test/v1"}],
        "deployments": [
            {"model": "m", "provider": "p", "upstream_model": "up", "price": PRICE},
            {"model": "broken", "provider": "q", "upstream_model": "up-broken"},
        ],
        "retry": {"attempts_per_endpoint": 1, "max_attempts": 1},
    }
    if db_url is not None:
        config["database"] = {"url": db_url, "connect_timeout": 2}
        config["persistence"] = {
            "enabled": True,
            "spill_path": str(tmp_path / "spill.jsonl"),
            "flush_interval": 0.05,
            "retry_initial": 0.05,
            "retry_max": 0.2,
            "refresh_interval": 0.1,
            "shutdown_timeout": 5,
            **(persistence or {}),
        }
    config.update(overrides)
    return load_config(environ={}, **config)
