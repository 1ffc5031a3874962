"""The app with persistence on (SQLite and PostgreSQL): request records reach the database off the
request path, spend adds up, stored keys come and go on the running gateway, the catalog is
synced, bodies are kept only when asked, and shutdown flushes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.persistence import keys
from gateway.persistence.models import config_history, deployments, request_log, spend_daily
from gateway.persistence.requests import write_batch
from gateway.state import AppState
from kernel.errors import ProviderStreamError
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import CHAT, COST, USER, answer, settings
from tests.gateway.persistence.factories import record


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def count(engine: Engine, table: object) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()  # type: ignore[arg-type]


def test_records_spend_and_catalog(engine: Engine, tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, url_of(engine)), client_factory=lambda: MockHTTPClient(answer))
    with TestClient(app) as client:
        for i in range(5):
            assert (
                client.post("/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": f"ok-{i}"}).status_code
                == 200
            )
        with client.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers={**USER, "x-request-id": "st-1"}
        ) as r:
            r.read()
        assert (
            client.post(
                "/v1/chat/completions", json={**CHAT, "model": "broken"}, headers={**USER, "x-request-id": "bad-1"}
            ).status_code
            == 502
        )
        assert client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "anon-1"}).status_code == 401
        state: AppState = client.app_state["gw"]
        wait_for(lambda: state.persistence is not None and state.persistence.stats.written == 8)

    with engine.connect() as conn:
        rows = {r["request_id"]: r for r in conn.execute(select(request_log)).mappings()}
        spend = conn.execute(select(spend_daily)).mappings().all()
    assert set(rows) == {"ok-0", "ok-1", "ok-2", "ok-3", "ok-4", "st-1", "bad-1", "anon-1"}
    ok = rows["ok-0"]
    assert (ok["key_name"], ok["endpoint_id"], ok["status"], ok["prompt_tokens"], ok["cached_tokens"]) == (
        "config-key",
        "p/m",
        200,
        1000,
        800,
    )
    assert ok["cost_usd"] == pytest.approx(COST) and ok["request_body"] is None
    assert rows["st-1"]["stream"] and rows["st-1"]["ttft_ms"] is not None
    assert (rows["bad-1"]["status"], rows["bad-1"]["endpoint_id"]) == (502, "q/broken")
    assert (rows["anon-1"]["status"], rows["anon-1"]["key_name"], rows["anon-1"]["error"]) == (
        401,
        None,
        "AuthenticationFailed",
    )
    by_key = {s["key_name"]: s for s in spend}
    assert (
        by_key["config-key"]["requests"] == 7 and "" not in by_key
    )  # the 401 is no spend and by_key["config-key"]["cost_usd"] == pytest.approx(6 * COST)
    assert count(engine, deployments) == 2 and count(engine, config_history) == 4  # 2 providers, 2 deployments


def test_stored_keys_take_effect_and_revocations_too(engine: Engine, tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, url_of(engine)), client_factory=lambda: MockHTTPClient(answer))
    with TestClient(app) as client:
        secret = keys.create_key(engine, "alice")
        auth = {"authorization": f"Bearer {secret}"}
        wait_for(lambda: client.post("/v1/chat/completions", json=CHAT, headers=auth).status_code == 200)
        keys.revoke_key(engine, "alice")
        wait_for(lambda: client.post("/v1/chat/completions", json=CHAT, headers=auth).status_code == 401)
        assert client.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200  # config key


def test_keys_stored_before_start_are_loaded_at_start(engine: Engine, tmp_path: Path) -> None:
    secret = keys.create_key(engine, "bob")
    config = settings(tmp_path, url_of(engine), keys=False, persistence={"refresh_interval": 3600})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 401  # not open access
        assert (
            client.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {secret}"}).status_code
            == 200
        )


def test_bodies_only_when_opted_in(engine: Engine, tmp_path: Path) -> None:
    config = settings(tmp_path, url_of(engine), persistence={"store_bodies": True})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        client.post("/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": "b-1"})
        with client.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers={**USER, "x-request-id": "b-2"}
        ) as r:
            r.read()
    with engine.connect() as conn:
        rows = {
            r.request_id: r
            for r in conn.execute(
                select(request_log.c.request_id, request_log.c.request_body, request_log.c.response_body)
            )
        }
    assert '"content":"hi"' in rows["b-1"].request_body
    assert rows["b-1"].response_body.startswith('{"id":"x"')
    assert rows["b-2"].response_body.count("chat.completion.chunk") >= 1


def test_shutdown_flushes_the_queue(engine: Engine, tmp_path: Path) -> None:
    config = settings(tmp_path, url_of(engine), persistence={"flush_interval": 3600, "batch_size": 10_000})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        for _ in range(20):
            client.post("/v1/chat/completions", json=CHAT, headers=USER)
        assert count(engine, request_log) == 0  # nothing written yet: neither interval nor batch reached
    assert count(engine, request_log) == 20


def test_starts_and_serves_with_the_database_down(tmp_path: Path) -> None:
    config = settings(tmp_path, "postgresql://postgres@127.0.0.1:1/none", persistence={"shutdown_timeout": 1})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        for _ in range(3):
            assert client.post("/v1/chat/completions", json=CHAT, headers=USER).status_code == 200
    spill = tmp_path / "spill.jsonl"
    assert spill.exists() and len(spill.read_bytes().splitlines()) == 3  # kept for the next start


def test_the_retention_job_runs_in_the_background(engine: Engine, tmp_path: Path) -> None:
    now = time.time()
    write_batch(engine, [(now - 40 * 86400, record(f"old-{i}")) for i in range(5)] + [(now, record("new"))])
    config = settings(tmp_path, url_of(engine), retention={"interval": 0.1, "request_log_days": 30, "batch_size": 2})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))):
        wait_for(lambda: count(engine, request_log) == 1)
    with engine.connect() as conn:
        assert conn.execute(select(request_log.c.request_id)).scalar_one() == "new"


def test_deep_bodies_are_a_400_that_is_recorded_and_later_records_still_land(engine: Engine, tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    for _ in range(299):
        deep = {"a": deep}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": deep}}}
    config = settings(tmp_path, url_of(engine), persistence={"store_bodies": True})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        for rid, extra, param in (("deep-tools", {"tools": [tool]}, "tools[0].function.parameters"),
                                  ("deep-meta", {"metadata": deep}, "metadata.a.a.a")):
            r = client.post("/v1/chat/completions", json={**CHAT, **extra}, headers={**USER, "x-request-id": rid})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == param and "64" in r.json()["error"]["message"]
        assert client.post("/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": "after"}).status_code == 200
        wait_for(lambda: count(engine, request_log) == 3)
    with engine.connect() as conn:
        rows = {r.request_id: r.status for r in conn.execute(select(request_log.c.request_id, request_log.c.status))}
    assert rows == {"deep-tools": 400, "deep-meta": 400, "after": 200}


def test_upstream_error_text_stays_out_of_client_answers_and_goes_to_the_record(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kernel.errors import ProviderConnectError
    from providers.http_mock import MockResponse

    leak_401 = b'{"error": {"message": "Incorrect API key provided: sk-proj-****Xy9Z. You can find your key..."}}'

    def hostile(request: UpstreamRequest) -> MockResponse:
        if request.headers.get("x-scenario") == "401" or b'"user":"401"' in request.body:
            return MockResponse(401, {"content-type": "application/json"}, leak_401)
        if b'"user":"stream-cut"' in request.body:
            delta = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
            first = b"data: " + orjson.dumps(delta) + b"\n\n"
            cut = ProviderStreamError("upstream p/m: connection to 10.20.30.40:8443 reset mid-stream", endpoint="p/m")
            return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[first, cut])
        raise ProviderConnectError("cannot reach upstream p/m: connect to 10.20.30.40:8443 refused", endpoint="p/m")

    caplog.set_level(logging.WARNING, logger="gateway.http")
    app = create_app(settings(tmp_path, url_of(engine)), client_factory=lambda: MockHTTPClient(hostile))
    with TestClient(app) as client:
        auth = client.post(
            "/v1/chat/completions", json={**CHAT, "user": "401"}, headers={**USER, "x-request-id": "e-401"}
        )
        down = client.post("/v1/chat/completions", json=CHAT, headers={**USER, "x-request-id": "e-down"})
        with client.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "user": "stream-cut", "stream": True},
            headers={**USER, "x-request-id": "e-cut"},
        ) as r:
            streamed = r.read().decode()
        state: AppState = client.app_state["gw"]
        wait_for(lambda: state.persistence is not None and state.persistence.stats.written == 3)

    for resp, code, rid in ((auth, "upstream_auth_failed", "e-401"), (down, "upstream_unreachable", "e-down")):
        error = resp.json()["error"]
        assert resp.status_code == 502 and error["code"] == code, resp.text
        assert rid in error["message"]
        assert "sk-proj" not in resp.text and "Xy9Z" not in resp.text and "10.20.30.40" not in resp.text
    assert "upstream_stream_error" in streamed and "e-cut" in streamed and "10.20.30.40" not in streamed
    with engine.connect() as conn:
        details = dict(conn.execute(select(request_log.c.request_id, request_log.c.error_detail)).all())
    assert "sk-proj-****Xy9Z" in details["e-401"]
    assert "10.20.30.40:8443 refused" in details["e-down"]
    assert "10.20.30.40:8443 reset" in details["e-cut"]
    logged = caplog.text
    assert "e-401" in logged and "sk-proj-****Xy9Z" in logged and "10.20.30.40:8443 refused" in logged
