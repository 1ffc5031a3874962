"""Credentials in URLs never reach /readyz, the log, or the persistence worker's command line."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import load_config
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.stores import ProcessStore
from kernel.redact import RedactingFilter, mask_urls
from providers.http_mock import MockHTTPClient, MockResponse

SECRET = "s3cret-pw-4417"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"redis://:{SECRET}@10.0.0.7:6379/0", "redis://:***@10.0.0.7:6379/0"),
        (f"rediss://default:{SECRET}@cache:6380", "rediss://default:***@cache:6380"),
        (f"postgresql+psycopg://gw:{SECRET}@db:5432/gw", "postgresql+psycopg://gw:***@db:5432/gw"),
        (f"postgresql://gw@db/gw?sslmode=require&password={SECRET}", "postgresql://gw@db/gw?sslmode=require&password=***"),
        (f"at redis://:{SECRET}@h:1/0 and postgresql://u:{SECRET}@h/d", "at redis://:***@h:1/0 and postgresql://u:***@h/d"),
        # URL parsers (redis-py's too) end the userinfo at the last "@": so does the mask.
        (f"redis://:p@{SECRET}@cache:6379/0", "redis://:***@cache:6379/0"),
        (f"redis://u:{SECRET}@@cache:6379/0", "redis://u:***@cache:6379/0"),
        # libpq's key=value form.
        (f"host=db user=gw password={SECRET} dbname=gw", "host=db user=gw password=*** dbname=gw"),
        (f"host=db password='{SECRET} x' dbname=gw", "host=db password=*** dbname=gw"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("postgresql://gw@db:5432/gw", "postgresql://gw@db:5432/gw"),
    ],
)
def test_mask_urls(text: str, masked: str) -> None:
    assert mask_urls(text) == masked


def test_readyz_does_not_show_the_redis_password() -> None:
    settings = load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
        state_store={"backend": "redis", "url": f"redis://:{SECRET}@127.0.0.1:1/0", "timeout_s": 0.05},
    )
    app = create_app(settings, client_factory=lambda: MockHTTPClient(lambda r: MockResponse(200, {}, b"{}")))
    with TestClient(app) as client:
        ready = client.get("/readyz")
    store = ready.json()["state_store"]
    assert store["ok"] is False and "redis://:***@127.0.0.1:1/0" in store["error"]
    assert SECRET not in ready.text


def test_the_log_filter_masks_every_record(caplog: pytest.LogCaptureFixture) -> None:
    handler = logging.StreamHandler()
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "cannot reach %s", (f"redis://:{SECRET}@h:1/0",), None)
    assert RedactingFilter().filter(record)
    assert handler.format(record) == "cannot reach redis://:***@h:1/0"


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_the_persistence_worker_gets_the_database_url_over_a_pipe(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gw.db'}?password={SECRET}"  # a URL with a secret in it
    store = ProcessStore(DatabaseConfig(url=url))
    proc = await store._started()
    try:
        await asyncio.sleep(0.2)
        assert SECRET not in _cmdline(proc.pid)
        assert "gateway.persistence.worker" in _cmdline(proc.pid)
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert SECRET.encode() not in environ
    finally:
        await store.aclose()
    # Stopped at close: it never answered a call, so close kills it (nothing to lose; see
    # tests/gateway/persistence/test_stores.py). That it reads its piped config: the test below.
    assert proc.returncode == -signal.SIGKILL


async def test_the_persistence_worker_writes_with_its_piped_config(tmp_path: Path) -> None:
    from gateway.persistence import migrate
    from gateway.persistence.engine import make_engine
    from tests.gateway.persistence.factories import record

    config = DatabaseConfig(url=f"sqlite:///{tmp_path / 'gw.db'}")
    migrate.upgrade(make_engine(config))
    store = ProcessStore(config)
    try:
        assert await store.write([(1.0, record("piped-1"))]) == []
    finally:
        await store.aclose()
    assert os.path.getsize(tmp_path / "gw.db") > 0
