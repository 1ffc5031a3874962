"""Auth fails closed when the key store cannot be read: before the first successful key load and
past `auth.max_key_staleness_s`, a key only the database knows gets 503 key_store_unavailable,
config keys keep working, and /readyz says why. An unreachable or empty database never opens the API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.health_states import HealthStates
from gateway.persistence import keys, migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.refresher import Refresher
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.settings import AuthConfig
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import CHAT, CONFIG_KEY, USER, answer, settings
from tests.gateway.persistence.conftest import PgDatabases
from tests.gateway.persistence.tcp_proxy import TcpProxy

# Nothing listens on port 1: every connection is refused at once.
DEAD_DB = "postgresql+psycopg://nobody@127.0.0.1:1/none"


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def post(client: TestClient, headers: dict[str, str] | None = None) -> Any:
    return client.post("/v1/chat/completions", json=CHAT, headers=headers or {})


def test_database_down_at_start_with_no_config_key_does_not_open_the_api(tmp_path: Path) -> None:
    config = settings(tmp_path, DEAD_DB, keys=False, persistence={"writer": "thread"})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert post(client).status_code == 401
        resp = post(client, {"authorization": "Bearer sk-gw-some-stored-key"})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "key_store_unavailable"
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["auth"]["key_store"] == "unavailable" and "key store" in ready.json()["reason"]


def test_database_down_at_start_config_keys_work_others_get_503(tmp_path: Path) -> None:
    config = settings(tmp_path, DEAD_DB, persistence={"writer": "thread"})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert post(client, USER).status_code == 200
        resp = post(client, {"authorization": "Bearer sk-gw-some-stored-key"})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "key_store_unavailable"


def test_an_empty_database_does_not_open_the_api(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    migrate.upgrade(make_engine(DatabaseConfig(url=url)))
    config = settings(tmp_path, url, keys=False, persistence={"writer": "thread"})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert post(client).status_code == 401
        assert post(client, {"authorization": "Bearer anything-goes"}).status_code == 401
        auth = client.get("/readyz").json()["auth"]
        assert (auth["open"], auth["key_store"], auth["max_key_staleness_s"], "reason" in auth) == (False, "ok", 60.0, False)


def test_auth_open_true_opens_the_api_by_config(tmp_path: Path) -> None:
    config = settings(tmp_path, DEAD_DB, keys=False, persistence={"writer": "thread"}, auth={"open": True})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert post(client).status_code == 200


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    p = TcpProxy(("127.0.0.1", 5432))
    try:
        yield p
    finally:
        p.close()


@pytest.mark.services
def test_stored_keys_are_refused_past_the_maximum_staleness(
    pg_databases: PgDatabases, proxy: TcpProxy, tmp_path: Path
) -> None:
    direct = pg_databases.create("gwstale")
    engine = make_engine(DatabaseConfig(url=direct))
    migrate.upgrade(engine)
    secret = keys.create_key(engine, "alice")
    alice = {"authorization": f"Bearer {secret}"}
    config = settings(
        tmp_path,
        direct.replace(":5432/", f":{proxy.port}/"),
        persistence={"writer": "thread", "refresh_timeout": 1},
        auth={
            "admin_key": "sk-admin-0000000001",
            "keys": [{"name": "config-key", "key": CONFIG_KEY}],
            "max_key_staleness_s": 1.5,
        },
    )
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert post(client, alice).status_code == 200
        proxy.cut()
        wait_for(lambda: post(client, alice).status_code == 503)
        assert post(client, alice).json()["error"]["code"] == "key_store_unavailable"
        assert post(client, USER).status_code == 200  # config keys still work
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "could not refresh its keys" in ready.json()["auth"]["reason"]
        proxy.restore()
        wait_for(lambda: post(client, alice).status_code == 200)
        assert client.get("/readyz").status_code == 200
    engine.dispose()


class StalledDatabase:
    """A database whose queries never answer (a half-open connection)."""

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()


async def test_a_stalled_refresh_times_out() -> None:
    auth = Authenticator(AuthConfig(), open_access=False, stored=True)
    refresher = Refresher(StalledDatabase(), auth, HealthStates(), timeout=0.2)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await refresher.refresh()
    assert time.monotonic() - started < 5
    assert not auth.store_usable
