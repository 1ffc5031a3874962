"""Prometheus `/metrics`: parses with prometheus_client's parser and has the series after traffic;
labels stay bounded (no request ids, no keys); each app has its own registry; a queue overflow
drops with a counted metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.catalog import Catalog
from gateway.metrics import GatewayMetrics
from gateway.state import AppState
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, CHAT, CONFIG_KEY, COST, USER, answer, settings
from tests.gateway.persistence.factories import record


def scrape(client: TestClient) -> dict[str, list[Sample]]:
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    families: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(resp.text):
        families.setdefault(family.name, []).extend(family.samples)
    return families


def value(families: dict[str, list[Sample]], family: str, sample: str, **labels: str) -> float:
    matches = [
        s.value for s in families[family] if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (sample, labels, matches)
    return matches[0]


def traffic(client: TestClient) -> None:
    for i in range(3):
        assert (
            client.post(
                "/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": f"req-secret-{i}"}
            ).status_code
            == 200
        )
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=USER) as r:
        r.read()
    assert client.post("/v1/chat/completions", json={**CHAT, "model": "broken"}, headers=USER).status_code == 502
    assert (
        client.post("/v1/chat/completions", json={**CHAT, "model": "no-such-model-1234"}, headers=USER).status_code
        == 404
    )
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 401


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    with TestClient(create_app(settings(tmp_path, None), client_factory=lambda: MockHTTPClient(answer))) as c:
        yield c  # type: ignore[misc]


def test_series_after_traffic(client: TestClient) -> None:
    traffic(client)
    state: AppState = client.app_state["gw"]
    assert state.metrics is not None
    state.metrics.probe_outcome("p/m", "logprob_drift", "pass")
    client.post("/admin/api/health/demote", json={"endpoint": "q/broken", "reason": "500s"}, headers=ADMIN)
    m = scrape(client)
    p = {"endpoint": "p/m", "model": "m", "provider": "p"}

    assert value(m, "gateway_requests", "gateway_requests_total", **p, status_class="2xx") == 4
    assert value(m, "gateway_requests", "gateway_requests_total", endpoint="q/broken", status_class="5xx") == 1
    # The unknown model (404) and the request without a key (401, refused before its body is read).
    assert (
        value(m, "gateway_requests", "gateway_requests_total", endpoint="none", model="unknown", status_class="4xx")
        == 2
    )
    assert (
        value(
            m, "gateway_request_errors", "gateway_request_errors_total", endpoint="q/broken", error="AllAttemptsFailed"
        )
        == 1
    )
    assert (
        value(
            m, "gateway_request_errors", "gateway_request_errors_total", endpoint="none", error="AuthenticationFailed"
        )
        == 1
    )
    assert value(m, "gateway_request_latency_seconds", "gateway_request_latency_seconds_count", **p) == 4
    assert value(m, "gateway_request_latency_seconds", "gateway_request_latency_seconds_bucket", **p, le="+Inf") == 4
    assert value(m, "gateway_ttft_seconds", "gateway_ttft_seconds_count", **p) == 1
    assert value(m, "gateway_overhead_seconds", "gateway_overhead_seconds_count", **p) == 4
    assert value(m, "gateway_tokens", "gateway_tokens_total", **p, kind="prompt") == 4000
    assert value(m, "gateway_tokens", "gateway_tokens_total", **p, kind="cached") == 3200
    assert value(m, "gateway_tokens", "gateway_tokens_total", **p, kind="completion") == 400
    assert value(m, "gateway_cost_usd", "gateway_cost_usd_total", **p) == pytest.approx(4 * COST)
    assert value(m, "gateway_breaker_state", "gateway_breaker_state", endpoint="p/m") == 0
    assert value(m, "gateway_health_state", "gateway_health_state", endpoint="p/m", state="healthy") == 1
    assert value(m, "gateway_health_state", "gateway_health_state", endpoint="q/broken", state="demoted") == 1
    assert value(m, "gateway_health_state", "gateway_health_state", endpoint="q/broken", state="healthy") == 0
    assert value(m, "gateway_health_manual", "gateway_health_manual", endpoint="q/broken") == 1
    assert value(m, "gateway_endpoint_ready", "gateway_endpoint_ready", endpoint="p/m") == 1
    assert (
        value(
            m, "gateway_probe_runs", "gateway_probe_runs_total", endpoint="p/m", probe="logprob_drift", verdict="pass"
        )
        == 1
    )


def test_labels_are_bounded(client: TestClient) -> None:
    traffic(client)
    allowed = {"endpoint", "model", "provider", "api", "status_class", "error", "kind", "state", "probe", "verdict", "le", "loop"}
    for samples in scrape(client).values():
        for s in samples:
            assert set(s.labels) <= allowed, s
            for v in s.labels.values():
                assert "req-secret" not in v and CONFIG_KEY not in v and "config-key" not in v
                assert "no-such-model" not in v


def test_requests_count_by_the_api_the_client_spoke(client: TestClient) -> None:
    # Responses and Messages requests are routed as chat; the counter says which API was spoken.
    assert client.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200
    assert client.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=USER).status_code == 200
    messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/messages", json=messages, headers={"x-api-key": CONFIG_KEY}).status_code == 200
    m = scrape(client)
    p = {"endpoint": "p/m", "model": "m", "provider": "p", "status_class": "2xx"}
    for api in ("chat", "responses", "messages"):
        assert value(m, "gateway_requests", "gateway_requests_total", **p, api=api) == 1


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    make = lambda: create_app(settings(tmp_path, None), client_factory=lambda: MockHTTPClient(answer))  # noqa: E731
    with TestClient(make()) as one, TestClient(make()) as two:
        one.post("/v1/chat/completions", json=CHAT, headers=USER)
        assert value(scrape(one), "gateway_requests", "gateway_requests_total", endpoint="p/m", status_class="2xx") == 1
        assert [s for s in scrape(two)["gateway_requests"] if s.labels.get("endpoint") == "p/m"] == []


def test_metrics_can_be_turned_off(tmp_path: Path) -> None:
    config = settings(tmp_path, None, metrics={"enabled": False})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as c:
        assert c.get("/metrics").status_code == 404
        assert c.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200


def test_persistence_series_and_a_counted_overflow(tmp_path: Path) -> None:
    # The database is unreachable, the queue holds 2 and the spill file takes nothing: 3 of 5 drop.
    config = settings(
        tmp_path,
        "postgresql://postgres@127.0.0.1:1/none",
        persistence={"queue_size": 2, "spill_max_bytes": 0, "flush_interval": 60, "shutdown_timeout": 1},
    )
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as c:
        for _ in range(5):
            assert c.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200
        m = scrape(c)
        assert value(m, "gateway_persistence_dropped_records", "gateway_persistence_dropped_records_total") == 3
        assert value(m, "gateway_persistence_queue_depth", "gateway_persistence_queue_depth") == 2
        assert value(m, "gateway_persistence_queue_capacity", "gateway_persistence_queue_capacity") == 2
        assert value(m, "gateway_persistence_spilled_records", "gateway_persistence_spilled_records_total") == 0
        for family in (
            "gateway_persistence_written_records",
            "gateway_persistence_write_errors",
            "gateway_persistence_spill_bytes",
            "gateway_persistence_db_up",
        ):
            assert family in m


def test_sink_binds_labels_once_per_series() -> None:
    catalog = Catalog([], created=0)
    metrics = GatewayMetrics(catalog)
    for _ in range(3):
        metrics.sink.submit(record(endpoint=None, model="whatever"))
    text = metrics.render().decode()
    assert 'gateway_requests_total{api="chat",endpoint="none",model="unknown",provider="none",status_class="2xx"} 3.0' in text


def test_the_grafana_dashboard_uses_only_exported_series(tmp_path: Path) -> None:
    config = settings(tmp_path, "postgresql://postgres@127.0.0.1:1/none", persistence={"shutdown_timeout": 1})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as c:
        traffic(c)
        state: AppState = c.app_state["gw"]
        assert state.metrics is not None
        state.metrics.probe_outcome("p/m", "logprob_drift", "pass")
        state.health.set_score("p/m", 0.9)
        exported = {s.name for samples in scrape(c).values() for s in samples}
    dashboard = json.loads((Path(__file__).parents[2] / "dashboards" / "grafana" / "gateway.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\bgateway_[a-z_]+", e)}
    assert len(used) >= 15
    assert used <= exported, used - exported


def test_background_loops_export_their_last_success(client: TestClient) -> None:
    import time

    deadline = time.monotonic() + 10
    while True:
        families = scrape(client)
        loops = {s.labels["loop"]: s.value for s in families.get("gateway_background_last_success_timestamp_seconds", [])}
        if "state_sync" in loops or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert abs(loops["state_sync"] - time.time()) < 60
    stale = {s.labels["loop"]: s.value for s in families["gateway_background_stale"]}
    assert stale["state_sync"] == 0.0


def test_metrics_can_require_the_admin_key(tmp_path: Path) -> None:
    config = settings(tmp_path, None, metrics={"require_auth": True})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=USER).status_code == 403  # a gateway key is not enough
        assert client.get("/metrics", headers=ADMIN).status_code == 200
    with TestClient(create_app(settings(tmp_path, None), client_factory=lambda: MockHTTPClient(answer))) as client:
        assert client.get("/metrics").status_code == 200  # off by default: scrapers on a private network
