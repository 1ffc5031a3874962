"""Two gateway processes sharing the real Redis: a breaker opened through one is seen by the
other, a shared key limit admits only its quota across both, and a conversation keeps hitting
the same engine replica whichever gateway it goes through."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop
from tests.gateway.state_store.redis_helpers import (
    REDIS_URL,
    delete_prefix,
    free_port,
    redis_available,
    unique_prefix,
)
from tests.services import require

ROOT = Path(__file__).resolve().parents[3]
KEY, LIMITED_KEY, ADMIN = "sk-replica-test-01", "sk-replica-limited", "sk-replica-admin-1"
# An agent's think time between turns (seconds in real sessions); longer than the sync interval, so
# each gateway has seen the other's last request finish (a request still in flight elsewhere is
# load, and load may rightly move a conversation).
THINK_S = 0.3
SYSTEM = "You are the build agent. Follow the repository conventions exactly. " * 20


@pytest.fixture(autouse=True)
def _redis_answers() -> None:
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")


class Gateway:
    def __init__(self, config: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "GW_AUTH__ADMIN_KEY": ADMIN, "PYTHONPATH": str(ROOT)}
        self.log = config.with_suffix(f".{port}.log")
        self._log_file = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli.gwctl", "serve", "-c", str(config), "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("gateway did not become ready")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log_file.close()


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, FakeOpenAIUpstream]]:
    loop = BackgroundLoop().start()
    servers = {name: loop.call(FakeOpenAIUpstream().start()) for name in ("cloud", "replica0", "replica1")}
    yield servers
    for server in servers.values():
        loop.call(server.stop())
    loop.stop()


@pytest.fixture(scope="module")
def gateways(upstreams: dict[str, FakeOpenAIUpstream], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Gateway]]:
    prefix = unique_prefix()
    config = {
        "auth": {"keys": [{"name": "team", "key": KEY}, {"name": "limited", "key": LIMITED_KEY}]},
        "retry": {"attempts_per_endpoint": 1, "backoff_base": 0, "backoff_max": 0},
        "breaker": {"min_requests": 2, "failure_rate": 0.5, "open_seconds": 60, "window_seconds": 60},
        "state_store": {"backend": "redis", "url": REDIS_URL, "key_prefix": prefix, "sync_interval_s": 0.1},
        "routing": {"keys": {"limited": {"rpm": 5}}},
        "providers": [
            {"name": "fake-a", "kind": "openai", "base_url": upstreams["cloud"].url},
            {"name": "fake-b", "kind": "openai", "base_url": upstreams["cloud"].url},
            {"name": "local", "kind": "vllm", "base_url": upstreams["replica0"].url},
        ],
        "deployments": [
            {"model": "brk", "provider": "fake-a", "upstream_model": "a@status:500"},
            {"model": "brk", "provider": "fake-b", "upstream_model": "b-ok"},
            {"model": "plain", "provider": "fake-b", "upstream_model": "plain-ok"},
            {"model": "sess", "provider": "local", "id": "local-0", "upstream_model": "r0", "routing": {"slots": 1}},
        ],
    }
    # The second replica of the local engine is another server: give it its own provider entry
    # with the same name space (endpoint ids local-0 / local-1, provider "local").
    config["providers"].append({"name": "local-b", "kind": "vllm", "base_url": upstreams["replica1"].url})
    config["deployments"].append({"model": "sess", "provider": "local-b", "id": "local-1", "upstream_model": "r1", "routing": {"slots": 1}})
    path = tmp_path_factory.mktemp("replicas") / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    gws = [Gateway(path, free_port()), Gateway(path, free_port())]
    try:
        for gw in gws:
            gw.wait_ready()
        yield gws
    finally:
        for gw in gws:
            gw.stop()
        delete_prefix(prefix)


def post(gw: Gateway, body: dict[str, Any], key: str = KEY) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=10)


def breaker_state(gw: Gateway, endpoint_id: str) -> str:
    data = httpx.get(gw.url + "/admin/api/endpoints", headers={"authorization": f"Bearer {ADMIN}"}, timeout=5).json()["data"]
    return next(e["breaker"]["state"] for e in data if e["id"] == endpoint_id)


def eventually(check: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def test_breaker_opened_by_one_is_seen_by_the_other(gateways: list[Gateway], upstreams: dict[str, FakeOpenAIUpstream]) -> None:
    g1, g2 = gateways
    body = {"model": "brk", "messages": [{"role": "user", "content": "hi"}]}
    assert breaker_state(g2, "fake-a/brk") == "closed"
    for _ in range(2):
        resp = post(g1, body)
        assert resp.status_code == 200 and resp.headers["x-gateway-endpoint"] == "fake-b/brk"
    assert breaker_state(g1, "fake-a/brk") == "open"
    assert eventually(lambda: breaker_state(g2, "fake-a/brk") == "open")
    failing_before = len(upstreams["cloud"].requests_for("a@status:500"))
    for _ in range(3):
        resp = post(g2, body)
        assert resp.status_code == 200 and resp.headers["x-gateway-attempts"] == "1"
    assert len(upstreams["cloud"].requests_for("a@status:500")) == failing_before  # g2 never tried it


def test_a_shared_key_limit_admits_only_its_quota(gateways: list[Gateway]) -> None:
    body = {"model": "plain", "messages": [{"role": "user", "content": "count me"}]}
    codes = [post(gateways[i % 2], body, LIMITED_KEY).status_code for i in range(12)]
    assert codes.count(200) == 5 and codes.count(429) == 7, codes
    # Both gateways refused some: the quota was shared, not per process.
    assert 429 in codes[0::2] and 429 in codes[1::2]


def test_a_session_keeps_its_replica_through_either_gateway(gateways: list[Gateway]) -> None:
    homes = set()
    for session in range(4):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"task {session}: fix the flaky test"}]
        served = []
        for turn in range(6):
            time.sleep(THINK_S)
            resp = post(gateways[turn % 2], {"model": "sess", "messages": messages})
            assert resp.status_code == 200
            served.append(resp.headers["x-gateway-endpoint"])
            messages += [{"role": "assistant", "content": resp.json()["choices"][0]["message"]["content"]}, {"role": "user", "content": f"turn {turn}: continue"}]
        assert len(set(served)) == 1, served
        homes.add(served[0])
    # The replicated index: the other gateway predicts the hit for the next turn.
    explain = httpx.post(
        gateways[1].url + "/admin/api/route/explain",
        json={"body": {"model": "sess", "messages": messages}},
        headers={"authorization": f"Bearer {ADMIN}"},
        timeout=5,
    ).json()
    ranked = {r["endpoint"]: r for r in explain["ranked"]}
    assert ranked[explain["pick"]]["facts"]["match_blocks"] > 0
