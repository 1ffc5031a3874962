"""The admin JSON API over persistence (SQLite and PostgreSQL): every admin route refuses callers
without the admin key; figures, time series, probe runs, health, manual actions, spend; the
OpenAPI description covers every route."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.persistence import probes
from gateway.persistence.models import endpoint_states, manual_actions
from gateway.state import AppState
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, CHAT, COST, USER, answer, settings


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(settings(tmp_path, url_of(engine)), client_factory=lambda: MockHTTPClient(answer))
    with TestClient(app) as c:
        yield c


def admin_routes(client: TestClient) -> list[tuple[str, str]]:
    out = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Route) and route.path.startswith("/admin/"):
            path = re.sub(r"\{run_id(:int)?\}", "1", route.path)
            out.extend((method, path) for method in sorted(route.methods or ()) if method != "HEAD")
    return out


def test_every_admin_route_needs_the_admin_key(engine: Engine, tmp_path: Path) -> None:
    config = settings(tmp_path, url_of(engine))
    # Two failures per route: past the default limit per address, which has its own test.
    config = config.model_copy(update={"auth": config.auth.model_copy(update={"admin_failures_per_minute": 1000})})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        _every_route_needs_the_admin_key(client)


def _every_route_needs_the_admin_key(client: TestClient) -> None:
    routes = admin_routes(client)
    assert len(routes) >= 14
    for method, path in routes:
        anonymous = client.request(method, path, json={})
        assert anonymous.status_code == 401, (method, path)
        assert anonymous.json()["error"]["code"] == "invalid_api_key"
        assert (
            client.request(method, path, json={}, headers={"authorization": "Bearer sk-wrong-key-000"}).status_code
            == 401
        )
        assert client.request(method, path, json={}, headers=USER).status_code == 403, (method, path)  # a gateway key


def test_admin_api_disabled_without_an_admin_key(engine: Engine, tmp_path: Path) -> None:
    config = settings(tmp_path, url_of(engine))
    config = config.model_copy(update={"auth": config.auth.model_copy(update={"admin_key": None})})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as c:
        for method, path in admin_routes(c):
            assert c.request(method, path, json={}, headers=USER).status_code == 403, (method, path)


def test_openapi_describes_every_admin_route(client: TestClient) -> None:
    doc = client.get("/admin/api/openapi.json", headers=ADMIN).json()
    assert doc["openapi"].startswith("3.")
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    for method, path in admin_routes(client):
        assert (method, path.replace("/runs/1", "/runs/{run_id}")) in described


def traffic(client: TestClient) -> None:
    for _ in range(10):
        assert client.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=USER) as r:
        r.read()
    client.post("/v1/chat/completions", json={**CHAT, "model": "broken"}, headers=USER)
    state: AppState = client.app_state["gw"]
    assert state.persistence is not None
    wait_for(lambda: state.persistence.stats.written == 12)  # type: ignore[union-attr]


def test_endpoint_stats_over_windows(client: TestClient) -> None:
    traffic(client)
    body = client.get("/admin/api/endpoints/stats?windows=5m,1h", headers=ADMIN).json()
    assert body["windows"] == ["5m", "1h"]
    eps = {e["id"]: e for e in body["data"]}
    assert set(eps) == {"p/m", "q/broken"}
    p = eps["p/m"]
    assert (p["state"], p["manual"], p["score"], p["breaker"]["state"]) == ("healthy", False, None, "closed")
    w = p["windows"]["5m"]
    assert (w["requests"], w["errors"], w["error_rate"]) == (11, 0, 0.0)
    assert w["cache_hit_rate"] == 0.8 and w["cost_usd"] == pytest.approx(11 * COST)
    assert set(w["latency_ms"]) == {"p50", "p95", "p99"} and set(w["ttft_ms"]) == {"p50", "p95"}
    broken = eps["q/broken"]["windows"]["1h"]
    assert (broken["requests"], broken["errors"], broken["error_rate"]) == (1, 1, 1.0)
    assert client.get("/admin/api/endpoints/stats?windows=1x", headers=ADMIN).status_code == 400


def test_timeseries(client: TestClient) -> None:
    traffic(client)
    body = client.get("/admin/api/endpoints/timeseries?endpoint=p/m&window=1h&bucket=1m", headers=ADMIN).json()
    assert body["endpoint"] == "p/m" and body["bucket_s"] == 60
    assert sum(point["requests"] for point in body["data"]) == 11
    assert all(point["start"] % 60 == 0 for point in body["data"])
    assert client.get("/admin/api/endpoints/timeseries?endpoint=nope", headers=ADMIN).status_code == 404
    assert client.get("/admin/api/endpoints/timeseries", headers=ADMIN).status_code == 400
    assert (
        client.get("/admin/api/endpoints/timeseries?endpoint=p/m&window=30d&bucket=1s", headers=ADMIN).status_code
        == 400
    )


def test_probe_runs(client: TestClient, engine: Engine) -> None:
    run_id = probes.start_run(engine, "p/m", "logprob-drift", at=time.time())
    probes.add_results(
        engine, run_id, [probes.ProbeResult("logprob_drift", "pass", samples=10, p_value=0.4)], at=time.time()
    )
    probes.finish_run(engine, run_id, "pass", at=time.time(), tokens_spent=120)
    runs = client.get("/admin/api/probes/runs?endpoint=p/m", headers=ADMIN).json()["data"]
    assert [(r["id"], r["verdict"], r["tokens_spent"]) for r in runs] == [(run_id, "pass", 120)]
    one = client.get(f"/admin/api/probes/runs/{run_id}", headers=ADMIN).json()
    assert one["results"][0]["p_value"] == 0.4 and isinstance(one["started_at"], str)
    assert client.get(f"/admin/api/probes/runs/{run_id + 99}", headers=ADMIN).status_code == 404
    assert client.get("/admin/api/probes/runs?limit=0", headers=ADMIN).status_code == 400


def test_manual_demote_and_restore(client: TestClient, engine: Engine) -> None:
    state: AppState = client.app_state["gw"]
    demoted = client.post(
        "/admin/api/health/demote",
        json={"endpoint": "p/m", "reason": "wrong model behind it", "actor": "alice"},
        headers=ADMIN,
    )
    assert demoted.json() == {
        "endpoint": "p/m",
        "action": "demote",
        "changed": True,
        "persisted": True,
        "state": "demoted",
        "manual": True,
    }
    assert state.health.state("p/m") == "demoted" and not state.health.routable("p/m")
    again = client.post("/admin/api/health/demote", json={"endpoint": "p/m", "reason": "again"}, headers=ADMIN).json()
    assert again["changed"] is False

    health = {h["endpoint"]: h for h in client.get("/admin/api/health", headers=ADMIN).json()["data"]}
    assert health["p/m"]["state"] == "demoted" and health["p/m"]["reason"] == "wrong model behind it"
    assert health["q/broken"]["state"] == "healthy"

    restored = client.post(
        "/admin/api/health/restore",
        json={"endpoint": "p/m", "reason": "provider fixed it", "actor": "bob"},
        headers=ADMIN,
    )
    assert restored.json()["state"] == "healthy" and restored.json()["manual"] is False

    transitions = client.get("/admin/api/health/transitions?endpoint=p/m", headers=ADMIN).json()["data"]
    assert [(t["from_state"], t["to_state"], t["source"]) for t in transitions] == [
        ("demoted", "healthy", "manual"),
        ("healthy", "demoted", "manual"),
    ]
    assert transitions[1]["evidence"] == {"actor": "alice", "action": "demote"}
    actions = client.get("/admin/api/actions", headers=ADMIN).json()["data"]
    assert [(a["actor"], a["action"], a["reason"]) for a in actions] == [
        ("bob", "restore", "provider fixed it"),
        ("alice", "demote", "wrong model behind it"),
    ]
    with engine.connect() as conn:
        assert conn.execute(select(endpoint_states.c.state)).scalar_one() == "healthy"
        assert len(conn.execute(select(manual_actions)).all()) == 2


def test_manual_action_validation(client: TestClient) -> None:
    post = lambda body: client.post("/admin/api/health/demote", json=body, headers=ADMIN)  # noqa: E731
    assert post({"endpoint": "nope", "reason": "x"}).status_code == 404
    assert post({"endpoint": "p/m"}).status_code == 400
    assert post({"endpoint": "p/m", "reason": "  "}).status_code == 400
    assert post({"reason": "x"}).status_code == 400
    assert post({"endpoint": "p/m", "reason": "x", "actor": ""}).status_code == 400
    assert client.post("/admin/api/health/demote", content=b"not json", headers=ADMIN).status_code == 400


def test_demotion_on_one_replica_reaches_another(engine: Engine, tmp_path: Path) -> None:
    make = lambda: create_app(settings(tmp_path, url_of(engine)), client_factory=lambda: MockHTTPClient(answer))  # noqa: E731
    with TestClient(make()) as one, TestClient(make()) as two:
        one.post("/admin/api/health/demote", json={"endpoint": "p/m", "reason": "drift"}, headers=ADMIN)
        other: AppState = two.app_state["gw"]
        wait_for(lambda: other.health.state("p/m") == "demoted")
        assert other.health.get("p/m").manual


def test_spend(client: TestClient) -> None:
    traffic(client)
    body = client.get("/admin/api/spend?days=7", headers=ADMIN).json()
    (row,) = body["data"]
    assert row["key"] == "config-key" and row["requests"] == 12
    assert row["cost_usd"] == pytest.approx(11 * COST) and len(row["days"]) == 1
    assert client.get("/admin/api/spend?key=nobody", headers=ADMIN).json()["data"] == []
    assert client.get("/admin/api/spend?days=0", headers=ADMIN).status_code == 400


def test_persistence_status(client: TestClient) -> None:
    body = client.get("/admin/api/persistence", headers=ADMIN).json()
    assert body["queue_capacity"] == 10_000 and body["dropped"] == 0 and body["db_up"] is True


def test_without_persistence_the_database_routes_say_so(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path, None), client_factory=lambda: MockHTTPClient(answer))) as c:
        r = c.get("/admin/api/endpoints/stats", headers=ADMIN)
        assert r.status_code == 503 and r.json()["error"]["code"] == "persistence_disabled"
        assert c.get("/admin/api/spend", headers=ADMIN).status_code == 503
        demoted = c.post("/admin/api/health/demote", json={"endpoint": "p/m", "reason": "x"}, headers=ADMIN).json()
        assert demoted["state"] == "demoted" and demoted["persisted"] is None  # in memory only
