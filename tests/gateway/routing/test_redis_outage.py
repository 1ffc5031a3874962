"""Redis killed and restarted under traffic: no client sees an error, /readyz and the log say
what happened, and the gateway resynchronises when Redis is back. Uses a private redis-server
on a free port (never the shared one)."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from gateway.app import create_app
from gateway.config import load_config
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.state_store.redis_helpers import PrivateRedis
from tests.services import require

KEY = "sk-outage-test-0001"


@pytest.fixture(autouse=True)
def _redis_server_installed() -> None:
    require(shutil.which("redis-server") is not None, "redis-server is not installed")


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


@pytest.fixture
def gateway(private_redis: PrivateRedis) -> Iterator[GatewayServer]:
    loop = BackgroundLoop().start()
    upstream = loop.call(FakeOpenAIUpstream(chunk_delay=0.002).start())
    settings = load_config(
        environ={},
        auth={"keys": [{"name": "team", "key": KEY}]},
        state_store={"backend": "redis", "url": private_redis.url, "sync_interval_s": 0.1, "timeout_s": 0.2},
        # A key limit: every request is admitted through Redis while it answers.
        routing={"keys": {"team": {"rpm": 100_000, "tpm": 100_000_000}}},
        # The limits stage tries Redis again this soon after a failure (default 1 s).
        limits={"retry_store_after_s": 0.1},
        providers=[{"name": "up", "kind": "vllm", "base_url": upstream.url}],
        deployments=[
            {"model": "m", "provider": "up", "id": "up-0", "upstream_model": "r0", "routing": {"slots": 4}},
            {"model": "m", "provider": "up", "id": "up-1", "upstream_model": "r1", "routing": {"slots": 4}},
        ],
    )
    server = GatewayServer(create_app(settings), loop).start()
    yield server
    server.stop()
    loop.call(upstream.stop())
    loop.stop()


class Traffic(threading.Thread):
    """Requests back to back (streaming and not, growing conversations) until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop_flag = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.errors: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {KEY}"}, timeout=10) as client:
            i = 0
            while not self.stop_flag.is_set():
                messages = [{"role": "system", "content": "You are terse. " * 30}, {"role": "user", "content": f"request {i % 7}"}]
                body: dict[str, Any] = {"model": "m", "messages": messages, "stream": i % 2 == 0}
                try:
                    resp = client.post("/v1/chat/completions", json=body)
                    ok = resp.status_code == 200 and (not body["stream"] or resp.text.endswith("data: [DONE]\n\n"))
                    self.outcomes["ok" if ok else f"status {resp.status_code}"] += 1
                    if not ok:
                        self.errors.append(resp.text[:300])
                except httpx.HTTPError as exc:
                    self.outcomes["exception"] += 1
                    self.errors.append(repr(exc))
                i += 1


def store_status(gw: GatewayServer) -> tuple[int, dict[str, Any]]:
    resp = httpx.get(gw.root + "/readyz", timeout=5)
    return resp.status_code, resp.json()["state_store"]


def wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_redis_killed_and_restarted_mid_traffic(
    gateway: GatewayServer, private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    traffic = Traffic(gateway.url.removesuffix("/v1"))
    traffic.start()
    try:
        time.sleep(1.0)
        code, status = store_status(gateway)
        assert code == 200 and status["ok"] is True and status["backend"] == "redis"
        before_outage = traffic.outcomes["ok"]

        private_redis.stop()
        def down() -> tuple[int, dict[str, Any]] | None:
            code, status = store_status(gateway)
            return None if status["ok"] else (code, status)

        code, status = wait_for(down)
        assert code == 200  # still ready: it serves on local state
        assert status["serving_on"] == "local state" and "redis" in status["error"]
        time.sleep(1.0)
        during_outage = traffic.outcomes["ok"] - before_outage

        private_redis.start()
        wait_for(lambda: store_status(gateway)[1]["ok"])
        status = store_status(gateway)[1]
        assert status["resyncs"] >= 1
        time.sleep(0.5)
    finally:
        traffic.stop_flag.set()
        traffic.join(15)

    assert traffic.outcomes["ok"] > 20 and during_outage > 5, traffic.outcomes
    assert set(traffic.outcomes) == {"ok"}, (traffic.outcomes, traffic.errors[:3])
    assert "unavailable" in caplog.text and "is back" in caplog.text
    # Resynchronised: the restarted (empty) Redis holds this replica's state again.
    client = redis.Redis.from_url(private_redis.url)
    try:
        keys = {k.decode() for k in client.scan_iter("gw:*")}
    finally:
        client.close()
    # The key's limit is counted by the limits stage (gateway.limits), under its own prefix.
    assert {"gw:inflight", "gw:lim:rl:key:team", "gw:lat:up-0"} <= keys or {"gw:inflight", "gw:lim:rl:key:team", "gw:lat:up-1"} <= keys, keys
