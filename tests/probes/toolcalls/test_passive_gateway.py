"""The passive monitor inside a real gateway (uvicorn on loopback) in front of the testbed's server
(its own process, over a scripted honest model: `scripted_testbed`):
- real corruption (the testbed's `tool_corruption` fault) seen by two clients starts the gateway's
  own tool-call suite, and that run, not the monitor, makes the endpoint SUSPECT/DEMOTED;
- hostile clients (forged mismatches, unsatisfiable schemas) move no state, and from two keys
  they get no more than one confirmation run, which the honest endpoint passes;
- hostile schemas ($ref to a socket that never answers, file:// refs, ReDoS, an exponential schema)
  never stall the gateway: /healthz answers within 100 ms throughout; a 1.2 MB schema is unchecked;
- with persistence on, the confirmation run and its transition are stored."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from probes.testbed.endpoints import EndpointSpec
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.probes.toolcalls import scripted_testbed
from tests.probes.toolcalls.test_checker import exponential
from tests.probes.toolcalls.test_validator import WEATHER

ADMIN_KEY = "sk-admin-tools-0001"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
KEYS = {"team-a": "sk-team-a-000001", "team-b": "sk-team-b-000002"}
BAD, GOOD = "tb/corrupt", "tb/honest"
# The one confirmation run an alarm starts must find the fault: a clean pass holds the next one off
# for the cooldown (an hour). Over the whole suite (100 cases with calls) the run fails from 3 bad
# responses on, so at 20% it misses with P(Binomial(100, 0.2) <= 2) < 1e-7; 40 sampled cases
# at 10% (about 34 calls, one bad response passes) missed 8% of the time.
CORRUPTION = {"tool_corruption": {"rate": 0.2}, "seed": 3}


def auth(team: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[team]}"}


def gateway_settings(testbed_root: str, **extra: Any) -> Settings:
    return load_config(
        environ={},
        auth={"admin_key": ADMIN_KEY, "keys": [{"name": n, "key": k} for n, k in KEYS.items()]},
        providers=[
            {"name": "corrupt", "base_url": f"{testbed_root}/corrupt/v1"},
            {"name": "honest", "base_url": f"{testbed_root}/honest/v1"},
        ],
        deployments=[
            {"model": "tools-bad", "provider": "corrupt", "upstream_model": "smollm2", "id": BAD},
            # A window that fits the 1.2 MB schema: the schema is what is under test here.
            {"model": "tools-good", "provider": "honest", "upstream_model": "smollm2", "id": GOOD,
             "context_window": 2_000_000},
        ],
        # Every response checked (the bound on waiting checks has its own test): counts are exact.
        # The whole suite per run: the power the confirmation needs (CORRUPTION).
        probes={"toolcalls": {"cases": None}, "tool_monitor": {"max_pending": 10_000}},
        **extra,
    )


@pytest.fixture
def gateway() -> Iterator[str]:
    testbed, root = scripted_testbed.start([EndpointSpec("honest"), EndpointSpec("corrupt", fault=CORRUPTION)])
    loop = BackgroundLoop().start()
    try:
        server = GatewayServer(create_app(gateway_settings(root)), loop).start()
        try:
            yield server.root
        finally:
            server.stop()
    finally:
        loop.stop()
        scripted_testbed.stop(testbed)


def chat(client: httpx.Client, model: str, team: str, tools: list[dict[str, Any]] | None = None) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "weather?"}], "tools": tools or [WEATHER]}
    resp = client.post("/v1/chat/completions", json=body, headers=auth(team))
    assert resp.status_code == 200, resp.text


def states(client: httpx.Client) -> dict[str, dict[str, Any]]:
    resp = client.get("/admin/api/health", headers=ADMIN)
    assert resp.status_code == 200
    return {row["endpoint"]: row for row in resp.json()["data"]}


def series(client: httpx.Client, name: str) -> dict[tuple[str, ...], float]:
    text = client.get("/metrics").text
    found = re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M)
    return {tuple(re.findall(r'="([^"]*)"', labels)): float(v) for labels, v in found}


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_real_corruption_is_confirmed_by_the_active_suite(gateway: str) -> None:
    with httpx.Client(base_url=gateway, timeout=10) as client:
        sent = 0
        while states(client)[BAD]["state"] == "healthy":
            assert sent < 300, f"the corruption was never confirmed: {series(client, 'gateway_probe_runs_total')}"
            chat(client, "tools-bad", "team-a" if sent % 2 else "team-b")
            chat(client, "tools-good", "team-a" if sent % 2 else "team-b")
            sent += 1
        wait_for(lambda: series(client, "gateway_probe_runs_total").get((BAD, "toolcalls", "fail"), 0) >= 1)
        current = states(client)
        calls = series(client, "gateway_tool_calls_total")
        runs = series(client, "gateway_probe_runs_total")
    assert current[BAD]["state"] in ("suspect", "demoted") and current[BAD]["source"] == "probe"
    assert current[GOOD]["state"] == "healthy"
    assert sum(v for (ep, result), v in calls.items() if ep == BAD and result not in ("ok", "unchecked")) >= 2
    assert not any(ep == GOOD for ep, _, _ in runs)  # the honest endpoint was never even re-tested


def forged(client: httpx.Client, team: str, n: int, tools: list[dict[str, Any]]) -> None:
    for _ in range(n):
        chat(client, "tools-good", team, tools)


# The scripted model answers "city-x" and "days": 1 (schema-valid for WEATHER); these schemas make
# those honest answers fail (a forged mismatch) or can never be met at all.
FORGED = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 2}}, "required": ["city"]}}}]  # fmt: skip
UNSATISFIABLE = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "not": {}}}}]


def test_hostile_clients_move_no_state(gateway: str) -> None:
    with httpx.Client(base_url=gateway, timeout=10) as client:
        forged(client, "team-a", 50, UNSATISFIABLE)
        forged(client, "team-b", 50, UNSATISFIABLE)  # two keys, but no evidence at all
        forged(client, "team-a", 200, FORGED)  # one key: one piece of evidence, however many requests
        wait_for(lambda: sum(v for (ep, _), v in series(client, "gateway_tool_calls_total").items() if ep == GOOD) >= 300)
        calls = series(client, "gateway_tool_calls_total")
        assert calls[(GOOD, "schema_mismatch")] == 200 and calls[(GOOD, "unchecked")] == 100
        assert not series(client, "gateway_probe_runs_total")  # no confirmation was started
        before = states(client)[GOOD]
        assert before["state"] == "healthy"

        forged(client, "team-b", 1, FORGED)  # a second key: the alarm starts one run of the suite...
        wait_for(lambda: series(client, "gateway_probe_runs_total").get((GOOD, "toolcalls", "pass"), 0) == 1)
        forged(client, "team-a", 50, FORGED)
        forged(client, "team-b", 50, FORGED)  # ...and no more within the cooldown
        time.sleep(0.5)
        assert series(client, "gateway_probe_runs_total") == {(GOOD, "toolcalls", "pass"): 1.0}
        after = states(client)[GOOD]
    assert after == before  # the honest endpoint passed: state, source and time unchanged


class SilentSocket:
    """Listens, never accepts: a fetch of a $ref to it would hang forever."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/schema.json"

    def close(self) -> None:
        self.sock.close()

    def connections(self) -> int:
        n = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return n
            conn.close()
            n += 1


@pytest.fixture
def silent() -> Iterator[SilentSocket]:
    """Closed in teardown, so a test that fails midway leaves no listener for GC to close later
    (its ResourceWarning would then fail whichever test happens to run at that moment)."""
    sock = SilentSocket()
    try:
        yield sock
    finally:
        sock.close()


def tool(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "get_weather", "parameters": parameters}}]


def test_hostile_schemas_never_stall_the_gateway(gateway: str, silent: SilentSocket) -> None:
    big = {"type": "object", "properties": {f"p{i:05d}": {"type": "string", "description": "x" * 40} for i in range(17_000)}}
    assert len(orjson.dumps(big)) > 1_200_000
    hostile = [
        tool({"type": "object", "properties": {"city": {"$ref": silent.url}}}),
        tool({"type": "object", "properties": {"city": {"$ref": "file:///dev/zero"}}}),
        tool({"type": "object", "$ref": "file:///etc/passwd"}),
        tool({"type": "object", "properties": {"s": {"type": "string", "enum": ["a" * 5000 + "!"], "pattern": "^(a+)+$"}}}),
        tool(exponential()),
    ]
    with httpx.Client(base_url=gateway, timeout=10) as client:
        forged(client, "team-a", 1, [WEATHER])  # the schema worker is started before the clock runs
        wait_for(lambda: series(client, "gateway_tool_calls_total").get((GOOD, "ok"), 0) == 1)
        # Encoded up front: the client's own JSON work on 1.2 MB must not hold this process's GIL
        # while the clock runs (the gateway under test shares it).
        benign = [body_of([WEATHER])] * len(hostile)
        baseline = polled(gateway, client, benign)  # this machine's own jitter, right now
        during = polled(gateway, client, [body_of(tools) for tools in hostile])
        # The audit's 1.2 MB schema (1.3 s of CPU on the loop before): parsing a body that size is
        # the gateway's ordinary cost (tens of ms), so it is sent outside the timed window.
        polled(gateway, client, [body_of(tool(big))], rounds=1)
        wait_for(lambda: sum(v for (ep, _), v in series(client, "gateway_tool_calls_total").items() if ep == GOOD) >= 32)
        calls = series(client, "gateway_tool_calls_total")
        current = states(client)[GOOD]
    reached = silent.connections()
    # 100 ms, or 3x what benign requests cost on a machine loaded past that: the old code blocked
    # the loop for as long as the silent socket kept the connection (forever) or the schema ran.
    bound = max(0.1, 3 * max(baseline))
    assert len(during) > 20 and max(during) < bound, (sorted(during)[-5:], sorted(baseline)[-3:])
    assert reached == 0  # nothing ever reached the socket
    assert calls[(GOOD, "unchecked")] == 13  # refs (3 x 3), the exponential one (3) and the big one: not judged
    assert current["state"] == "healthy"


def body_of(tools: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": "tools-good", "messages": [{"role": "user", "content": "weather?"}], "tools": tools})


def polled(gateway: str, client: httpx.Client, bodies: list[bytes], rounds: int = 3) -> list[float]:
    """/healthz latencies, polled every 10 ms from another thread while `bodies` are sent."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=gateway, timeout=5) as http:
            while not done.is_set():
                started = time.perf_counter()
                assert http.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    for i in range(rounds):
        for body in bodies:
            headers = {**auth("team-a" if i % 2 else "team-b"), "content-type": "application/json"}
            resp = client.post("/v1/chat/completions", content=body, headers=headers)
            assert resp.status_code == 200, resp.text
    time.sleep(0.3)  # checks still running in the worker
    done.set()
    poller.join(10)
    return latencies


def broken_call(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Pa'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"id": "x", "object": "chat.completion", "model": body["model"],
              "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(answer))


def test_the_confirmation_run_and_its_transition_are_stored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    engine = make_engine(DatabaseConfig(url=url))
    migrate.upgrade(engine)
    engine.dispose()
    settings = load_config(
        environ={},
        auth={"admin_key": ADMIN_KEY, "keys": [{"name": n, "key": k} for n, k in KEYS.items()]},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p", "id": "p/m"}],
        database={"url": url},
        persistence={"enabled": True, "spill_path": str(tmp_path / "spill.jsonl"), "refresh_interval": 0.1},
        probes={"toolcalls": {"cases": 20}},
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
    with TestClient(create_app(settings, client_factory=lambda: MockHTTPClient(broken_call))) as client:
        for team in KEYS:  # two bad responses from two keys cross h = 5
            assert client.post("/v1/chat/completions", json=body, headers=auth(team)).status_code == 200
        deadline = time.monotonic() + 20
        while not (rows := client.get("/admin/api/health/transitions", headers=ADMIN).json()["data"]):
            assert time.monotonic() < deadline, "the transition was never stored"
            time.sleep(0.05)
        runs = client.get("/admin/api/probes/runs", headers=ADMIN).json()["data"]
    first = rows[-1]
    assert (first["endpoint_id"], first["from_state"], first["source"]) == ("p/m", "healthy", "probe")
    assert first["to_state"] in ("suspect", "demoted") and first["evidence"]["run_id"] is not None
    assert runs and {r["trigger"] for r in runs} == {"tool_monitor"}
    assert "Pa" not in str(first["evidence"])  # counts only, never content
