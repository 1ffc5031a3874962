"""PostgreSQL goes away mid-traffic and comes back: no client request fails, and every request
record is in the database afterwards (queued, spilled past the queue's bound, replayed).

The gateway reaches PostgreSQL through a TCP proxy that the test cuts (open connections reset,
new ones refused) and restores, so the machine's real server is never stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.models import request_log, spend_daily
from gateway.state import AppState
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, CHAT, USER, answer, settings
from tests.gateway.persistence.conftest import PgDatabases
from tests.gateway.persistence.tcp_proxy import TcpProxy

pytestmark = pytest.mark.services


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    p = TcpProxy(("127.0.0.1", 5432))
    try:
        yield p
    finally:
        p.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_postgres_down_mid_traffic_loses_no_request_and_no_record(
    pg_databases: PgDatabases, proxy: TcpProxy, tmp_path: Path
) -> None:
    direct = pg_databases.create("gwoutage")
    engine = make_engine(DatabaseConfig(url=direct))
    migrate.upgrade(engine)
    through_proxy = direct.replace(":5432/", f":{proxy.port}/")
    config = settings(tmp_path, through_proxy, persistence={"queue_size": 40, "batch_size": 10})
    sent: list[str] = []
    statuses: list[int] = []

    def send(n: int, prefix: str) -> None:
        for i in range(n):
            request_id = f"{prefix}-{i}"
            sent.append(request_id)
            body = {**CHAT, "stream": i % 3 == 0}
            if body["stream"]:
                with client.stream(
                    "POST", "/v1/chat/completions", json=body, headers={**USER, "x-request-id": request_id}
                ) as r:
                    r.read()
                    statuses.append(r.status_code)
            else:
                statuses.append(
                    client.post(
                        "/v1/chat/completions", json=body, headers={**USER, "x-request-id": request_id}
                    ).status_code
                )

    try:
        with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
            state: AppState = client.app_state["gw"]
            p = state.persistence
            assert p is not None
            send(30, "before")
            wait_for(lambda: p.stats.written == 30)

            proxy.cut()  # the database is gone: connections reset, new ones refused
            send(150, "during")  # more than the queue holds: the rest spills
            wait_for(lambda: p.stats.write_errors > 0)
            assert not p.stats.db_up
            assert p.stats.spilled > 0 and len(p.queue) <= 40
            status = client.get("/admin/api/persistence", headers=ADMIN).json()
            assert status["spill_pending"] and status["db_up"] is False

            proxy.restore()  # the database is back
            send(20, "after")
            wait_for(lambda: p.stats.written + p.stats.replayed == 200 and not p.spill.pending() and len(p.queue) == 0)
            assert p.stats.db_up and p.stats.dropped == 0 and p.stats.replayed == p.stats.spilled
        assert statuses == [200] * 200  # zero failed client requests

        with engine.connect() as conn:
            stored = [r[0] for r in conn.execute(select(request_log.c.request_id))]
            requests = conn.execute(select(spend_daily.c.requests)).scalars().all()
        assert sorted(stored) == sorted(sent)  # every record, each exactly once
        assert sum(requests) == 200
    finally:
        engine.dispose()
