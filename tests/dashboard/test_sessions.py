"""Dashboard sessions and CSRF: the store (expiry, idle timeout, revocation, cap), the CSRF check, and
over HTTP the sign-in cookie (Secure behind TLS), the admin guard accepting the session, CSRF on
state-changing calls, sign-out, failure limits per address, no-store, and the sign-in body limit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from gateway import admin_sessions
from gateway.admin_sessions import SessionStore, admit, csrf_ok
from gateway.app import create_app
from gateway.config import load_config
from gateway.http import dashboard
from kernel.errors import AuthenticationFailed, ConfigError, PermissionDenied
from providers.http_mock import MockHTTPClient, MockResponse

ADMIN_KEY = "sk-admin-session-0001"
USER_KEY = "sk-user-session-0001"
SESSION = "/admin/ui/session"


# --- the store -------------------------------------------------------------------------------


def test_sessions_are_random_and_expire() -> None:
    store = SessionStore(ttl=60)
    a, b = store.create(100.0), store.create(100.0)
    assert a.id != b.id and a.csrf != b.csrf and a.id != a.csrf
    assert len(a.id) >= 40 and len(a.csrf) >= 40
    assert store.get(a.id, 159.9) == a
    assert store.get(a.id, 160.0) is None  # expired and dropped
    assert store.get(a.id, 100.0) is None
    assert (
        store.get(None, 100.0) is None
        and store.get("", 100.0) is None
        and store.get("nope", 100.0) is None
    )


def test_revoke_ends_a_session() -> None:
    store = SessionStore()
    s = store.create(0.0)
    assert store.revoke(s.id) is True
    assert store.get(s.id, 1.0) is None
    assert store.revoke(s.id) is False and store.revoke(None) is False


def test_store_is_capped_and_prunes_expired() -> None:
    store = SessionStore(ttl=10, max_sessions=3)
    first = store.create(0.0)
    for _ in range(3):
        store.create(1.0)
    assert len(store) == 3 and store.get(first.id, 1.0) is None  # the oldest made room
    store.create(20.0)  # everything older has expired
    assert len(store) == 1


def test_csrf_needed_only_for_state_changing_methods() -> None:
    s = SessionStore().create(0.0)
    for method in ("GET", "HEAD", "OPTIONS", "get"):
        assert csrf_ok(s, method, None)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert not csrf_ok(s, method, None)
        assert not csrf_ok(s, method, "")
        assert not csrf_ok(s, method, s.csrf + "x")
        assert not csrf_ok(s, method, s.id)  # the session id is not the token
        assert csrf_ok(s, method, s.csrf)


def test_admit_raises_the_gateway_errors() -> None:
    store = SessionStore()
    s = store.create(0.0)
    assert admit(store, s.id, "POST", s.csrf, 1.0) == s
    with pytest.raises(AuthenticationFailed):
        admit(store, "forged", "GET", None, 1.0)
    with pytest.raises(PermissionDenied) as info:
        admit(store, s.id, "POST", None, 1.0)
    assert info.value.code == "csrf_failed"


# --- over HTTP -------------------------------------------------------------------------------


def _settings(admin_key: str | None = ADMIN_KEY) -> Any:
    return load_config(
        environ={},
        auth={"admin_key": admin_key, "keys": [{"name": "user", "key": USER_KEY}]},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )


def _upstream(request: Any) -> MockResponse:
    return MockResponse(500, {}, b"{}")


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(
        create_app(_settings(), client_factory=lambda: MockHTTPClient(_upstream))
    ) as c:
        yield c


def _sign_in(client: TestClient) -> str:
    response = client.post(SESSION, json={"key": ADMIN_KEY})
    assert response.status_code == 200, response.text
    return str(response.json()["csrf_token"])


def test_sign_in_sets_a_strict_httponly_cookie_and_never_echoes_the_key(
    client: TestClient,
) -> None:
    response = client.post(SESSION, json={"key": ADMIN_KEY})
    assert response.status_code == 200
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(admin_sessions.COOKIE + "=")
    lowered = cookie.lower()
    assert (
        "httponly" in lowered
        and "samesite=strict" in lowered
        and "path=/admin" in lowered
    )
    assert ADMIN_KEY not in response.text and ADMIN_KEY not in cookie
    assert response.headers["cache-control"] == "no-store"
    assert set(response.json()) == {"csrf_token", "expires_in"}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"key": "sk-wrong-000000"}, 401),
        ({"key": USER_KEY}, 403),
        ({}, 401),
        ({"key": ""}, 401),
        ([], 401),
    ],
)
def test_sign_in_refuses_anything_but_the_admin_key(
    client: TestClient, body: Any, status: int
) -> None:
    response = client.post(SESSION, json=body)
    assert response.status_code == status
    assert "set-cookie" not in response.headers


def test_sign_in_needs_json(client: TestClient) -> None:
    # A cross-site HTML form posts form-encoded or text/plain bodies: refused, so no login CSRF.
    for content_type in (
        "application/x-www-form-urlencoded",
        "text/plain",
        "multipart/form-data",
    ):
        response = client.post(
            SESSION, content=f"key={ADMIN_KEY}", headers={"content-type": content_type}
        )
        assert response.status_code == 400
    assert (
        client.post(
            SESSION, content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 400
    )


def test_the_admin_api_accepts_the_session_and_csrf_guards_actions(
    client: TestClient,
) -> None:
    assert client.get("/admin/api/health").status_code == 401
    csrf = _sign_in(client)
    assert client.get("/admin/api/health").status_code == 200
    assert client.get("/admin/api/endpoints").status_code == 200
    assert client.get(SESSION).json()["csrf_token"] == csrf
    body = {"endpoint": "p/m", "reason": "testing"}
    refused = client.post("/admin/api/health/demote", json=body)
    assert (
        refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    )
    assert (
        client.post(
            "/admin/api/health/demote", json=body, headers={"x-csrf-token": "guess"}
        ).status_code
        == 403
    )
    assert client.get("/admin/api/health").json()["data"][0]["state"] == "healthy"
    ok = client.post(
        "/admin/api/health/demote", json=body, headers={"x-csrf-token": csrf}
    )
    assert ok.status_code == 200 and ok.json()["state"] == "demoted"


def test_a_bearer_header_still_wins_over_the_cookie(client: TestClient) -> None:
    _sign_in(client)
    wrong = client.get(
        "/admin/api/health", headers={"authorization": "Bearer sk-wrong-000000"}
    )
    assert wrong.status_code == 401
    bearer = client.post(
        "/admin/api/health/demote",
        json={"endpoint": "p/m", "reason": "cli"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert bearer.status_code == 200  # API clients with the key need no CSRF token


def test_sign_out_needs_csrf_and_kills_the_session(client: TestClient) -> None:
    csrf = _sign_in(client)
    session_id = client.cookies[admin_sessions.COOKIE]
    assert client.delete(SESSION).status_code == 403
    out = client.delete(SESSION, headers={"x-csrf-token": csrf})
    assert out.status_code == 200
    assert (
        admin_sessions.COOKIE in out.headers["set-cookie"]
        and "max-age=0" in out.headers["set-cookie"].lower()
    )
    client.cookies.set(
        admin_sessions.COOKIE, session_id, path="/admin"
    )  # a client that kept the old cookie
    assert client.get("/admin/api/health").status_code == 401
    assert client.get(SESSION).status_code == 401


def test_forged_session_cookies_are_refused(client: TestClient) -> None:
    client.cookies.set(admin_sessions.COOKIE, "forged-session-id", path="/admin")
    assert client.get("/admin/api/health").status_code == 401


def test_sessions_do_not_outlive_a_disabled_admin_key() -> None:
    with TestClient(
        create_app(_settings(None), client_factory=lambda: MockHTTPClient(_upstream))
    ) as c:
        assert c.post(SESSION, json={"key": ADMIN_KEY}).status_code == 403
        c.cookies.set(admin_sessions.COOKIE, "anything", path="/admin")
        assert c.get("/admin/api/health").status_code == 403


def test_pages_carry_a_strict_content_security_policy(client: TestClient) -> None:
    for path in (
        "/admin",
        "/admin/ui/static/app.js",
        "/admin/ui/static/vendor/uPlot.iife.min.js",
        SESSION,
    ):
        response = client.get(path)
        csp = response.headers.get("content-security-policy", "")
        assert (
            "script-src 'self'" in csp
            and "unsafe-inline" not in csp
            and "unsafe-eval" not in csp
        ), path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    page = client.get("/admin")
    assert page.status_code == 200 and page.headers["content-type"].startswith(
        "text/html"
    )
    assert (
        "<script>" not in page.text and " style=" not in page.text
    )  # no inline script or style
    assert ADMIN_KEY not in page.text


# --- hostile edges ---------------------------------------------------------------------------


def _app(clock: Any = None, **config: Any) -> Any:
    settings = _settings()
    for section, values in config.items():
        part = getattr(settings, section).model_copy(update=values)
        settings = settings.model_copy(update={section: part})
    kwargs = {"clock": clock} if clock is not None else {}
    return create_app(settings, client_factory=lambda: MockHTTPClient(_upstream), **kwargs)


def test_the_cookie_is_secure_when_the_public_url_is_https() -> None:
    with TestClient(_app(server={"public_url": "https://gw.example.com"})) as c:  # plain http socket
        cookie = c.post(SESSION, json={"key": ADMIN_KEY}).headers["set-cookie"].lower()
        assert "; secure" in cookie
    with TestClient(_app()) as c:
        assert "; secure" not in c.post(SESSION, json={"key": ADMIN_KEY}).headers["set-cookie"].lower()


def test_sign_in_failures_are_rate_limited_per_client_address() -> None:
    app = _app(auth={"admin_failures_per_minute": 3})
    with TestClient(app, client=("10.0.0.1", 4000)) as c, TestClient(app, client=("10.0.0.2", 4000)) as other:
        for _ in range(3):
            assert c.post(SESSION, json={"key": "sk-guess-00000000"}).status_code == 401
        limited = c.post(SESSION, json={"key": ADMIN_KEY})  # even the right key: not checked now
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        assert "set-cookie" not in limited.headers
        assert c.get("/admin/api/endpoints", headers={"authorization": f"Bearer {ADMIN_KEY}"}).status_code == 429
        assert other.post(SESSION, json={"key": ADMIN_KEY}).status_code == 200  # another address


def test_admin_bearer_failures_are_rate_limited_and_the_window_moves_on() -> None:
    now = [1000.0]
    app = _app(clock=lambda: now[0], auth={"admin_failures_per_minute": 2})
    with TestClient(app) as c:
        wrong = {"authorization": "Bearer sk-guess-00000000"}
        right = {"authorization": f"Bearer {ADMIN_KEY}"}
        assert c.get("/admin/api/endpoints", headers=wrong).status_code == 401
        assert c.get("/admin/api/endpoints", headers={"authorization": f"Bearer {USER_KEY}"}).status_code == 403
        assert c.get("/admin/api/endpoints", headers=right).status_code == 429
        assert c.get("/metrics").status_code == 200  # not an admin route unless metrics.require_auth
        now[0] += 61
        assert c.get("/admin/api/endpoints", headers=right).status_code == 200


def test_sessions_end_after_the_idle_timeout() -> None:
    store = SessionStore(ttl=3600, idle=60)
    s = store.create(0.0)
    assert store.get(s.id, 59.0) is s  # used: the idle clock starts again
    assert store.get(s.id, 118.0) is s
    assert store.get(s.id, 178.5) is None  # 60.5 s unused
    now = [1000.0]
    with TestClient(_app(clock=lambda: now[0], auth={"session_idle_timeout_s": 60})) as c:
        _sign_in(c)
        now[0] += 30
        assert c.get("/admin/api/health").status_code == 200
        now[0] += 61
        assert c.get("/admin/api/health").status_code == 401


def test_admin_json_is_never_cached(client: TestClient) -> None:
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    for path in ("/admin/api/endpoints", "/admin/api/engines", "/admin/api/health"):
        response = client.get(path, headers=admin)
        assert response.status_code == 200 and response.headers["cache-control"] == "no-store", path
    assert client.get("/admin/api/endpoints").headers["cache-control"] == "no-store"  # errors too


def test_the_admin_key_must_be_at_least_16_characters() -> None:
    with pytest.raises(ConfigError, match="auth.admin_key: must be at least 16 characters"):
        load_config(environ={"GW_AUTH__ADMIN_KEY": "sk-short-admin"})


def test_a_large_sign_in_body_is_refused_before_it_is_read(client: TestClient) -> None:
    state = client.app_state["gw"]

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    scope = {
        "type": "http", "method": "POST", "path": SESSION, "scheme": "http", "query_string": b"",
        "server": ("testserver", 80), "client": ("10.0.0.9", 1), "state": {"gw": state},
        "gateway.request_id": "req-big",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"1048576")],
    }  # fmt: skip
    response = asyncio.run(dashboard.session(Request(scope, receive)))
    assert response.status_code == 413
    # Without a length (chunked), the read stops at the limit.
    chunks = (b'{"key": "' + b"x" * 1024 for _ in range(64))
    big = client.post(SESSION, content=chunks, headers={"content-type": "application/json"})
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
