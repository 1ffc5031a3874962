"""A real gateway on loopback for the dashboard's browser tests, with seeded data: live traffic through
a fake upstream (`MockHTTPClient`), six hours of request history, probe runs, and health states set
through the admin API and the health-states object. And headless Chromium (Debian's), driven by
Playwright with that executable."""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import insert
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.app import create_app
from gateway.config import load_config
from gateway.persistence import migrate
from gateway.persistence import probes as probe_repo
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.models import request_log
from gateway.persistence.probes import ProbeResult
from gateway.persistence.types import utc
from gateway.state import AppState
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.catalog import make_endpoint
from tests.fakes.servers import BackgroundLoop, GatewayServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN_KEY = "sk-admin-dashboard-0001"
USER_KEY = "sk-user-dashboard-0001"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
EVIL = "<script>alert(1)</script>"
EVIL_MODEL = "<img src=x onerror=alert(2)>"
DEMOTE_REASON = "Canary: 100% upstream errors over 5 minutes"
SUSPECT_REASON = "KS drift on output lengths (p=0.003)"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard"
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 100,
    "total_tokens": 1100,
    "prompt_tokens_details": {"cached_tokens": 600},
}


async def upstream(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    await asyncio.sleep(random.uniform(0.005, 0.04))
    if body["model"] == "up-broken":
        return MockResponse(
            500,
            {"content-type": "application/json"},
            b'{"error": {"message": "boom <b>"}}',
        )
    answer = {
        "id": "x",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [],
        "usage": USAGE,
    }
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(answer))


class CaptureState:
    """Wraps the app to keep a handle on the lifespan's AppState (for seeding health states)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: AppState | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.state is None:
            self.state = scope["state"]["gw"]
        await self.app(scope, receive, send)


@dataclass
class Gateway:
    root: str
    state: AppState
    loop: BackgroundLoop

    def api(self, path: str, **kwargs: Any) -> Any:
        response = httpx.get(self.root + path, headers=ADMIN, timeout=10, **kwargs)
        response.raise_for_status()
        return response.json()

    def health(self, endpoint_id: str) -> dict[str, Any]:
        rows = self.api("/admin/api/health")["data"]
        return next(r for r in rows if r["endpoint"] == endpoint_id)


def settings(db_url: str, spill: Path) -> Any:
    price = {"input": 0.5, "cached_input": 0.1, "output": 1.5}
    return load_config(
        environ={},
        auth={"admin_key": ADMIN_KEY, "keys": [{"name": "team-a", "key": USER_KEY}]},
        providers=[
            {"name": "p", "base_url": "http://p.test/v1", "region": "eu-west"},
            {"name": "q", "base_url": "http://q.test/v1", "region": "us-east"},
            {"name": "r", "base_url": "http://r.test/v1", "region": "ap-south"},
        ],
        deployments=[
            {"model": "m", "provider": "p", "upstream_model": "up", "price": price},
            {"model": "broken", "provider": "q", "upstream_model": "up-broken"},
            {"model": "m2", "provider": "r", "upstream_model": "up", "price": price},
        ],
        retry={"attempts_per_endpoint": 1, "max_attempts": 1},
        database={"url": db_url, "connect_timeout": 2},
        persistence={
            "enabled": True,
            "spill_path": str(spill),
            "flush_interval": 0.05,
            "refresh_interval": 3600,
            "shutdown_timeout": 5,
        },
    )


def seed_history(engine: Any, now: float) -> None:
    """Six hours of traffic on p/m up to ten minutes ago, one row a minute, a latency wave, a few errors."""
    rows = []
    for i in range(360):
        at = (
            now - 6 * 3600 - 600 + i * 60
        )  # ends ten minutes ago: the 5m window is live traffic only
        status = 500 if i % 37 == 0 else 200
        latency = 180 + 60 * math.sin(i / 25) + (i % 7) * 5
        rows.append(
            {
                "at": utc(at), "request_id": uuid.uuid4().hex, "key_name": "team-a", "model": "m",
                "endpoint_id": "p/m", "op": "chat", "stream": True, "attempts": 1, "status": status,
                "error": "upstream_server_error" if status >= 400 else None,
                "prompt_tokens": 1000, "cached_tokens": 300 + (i * 7) % 600, "completion_tokens": 120,
                "cost_usd": 0.0007, "ttft_ms": latency / 3, "latency_ms": latency, "overhead_ms": 1.5,
            }
        )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(request_log), rows)


def seed_probes(engine: Any, now: float) -> None:
    for i, statistic in enumerate((0.04, 0.06, 0.05, 0.21)):
        at = now - 3600 * (4 - i)
        run = probe_repo.start_run(engine, "p/m", "drift", at=at)
        verdict = "fail" if statistic > 0.15 else "pass"
        result = ProbeResult(
            "ks_output_length", verdict, samples=64, statistic=statistic, p_value=0.4 if verdict == "pass" else 0.003,
            reference_samples=256, tokens_spent=9000, details={"threshold": 0.15, "note": "<b>not bold</b>"},
        )  # fmt: skip
        probe_repo.add_results(engine, run, [result], at=at + 30)
        probe_repo.finish_run(
            engine, run, verdict, at=at + 60, tokens_spent=9000, cost_usd=0.0123
        )


async def seed_health(state: AppState, now: float) -> None:
    assert state.persistence is not None
    for endpoint_id, to, reason in (
        ("r/m2", "suspect", SUSPECT_REASON),
        ("evil/xss", "probation", "Back after a demotion: <i>watching</i>"),
    ):
        outcome: dict[str, bool] = {}
        t = await state.health.transition(
            endpoint_id, to, source="probe", reason=reason, at=now, score=0.42, outcome=outcome  # type: ignore[arg-type]
        )
        assert t is not None and outcome == {"state_store": True, "database": True}  # stored by its sinks


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{tmp / 'gateway.db'}"
    engine = make_engine(DatabaseConfig(url=url))
    migrate.upgrade(engine)
    now = time.time()
    seed_history(engine, now)
    seed_probes(engine, now)
    engine.dispose()
    evil = make_endpoint("evil/xss", model=EVIL_MODEL, provider=EVIL)
    app = CaptureState(
        create_app(
            settings(url, tmp / "spill.jsonl"),
            client_factory=lambda: MockHTTPClient(upstream),
            extra_endpoints=[evil],
        )
    )
    loop = BackgroundLoop().start()
    server = GatewayServer(app, loop).start()
    try:
        user = {"authorization": f"Bearer {USER_KEY}"}
        with httpx.Client(base_url=server.root, timeout=10) as client:
            for i in range(12):
                model = "broken" if i % 4 == 3 else "m"
                client.post(
                    "/v1/chat/completions",
                    headers=user,
                    json={
                        "model": model,
                        "messages": [{"role": "user", "content": "hi"}],
                    },
                )
            client.get(
                "/admin/api/health", headers=ADMIN
            ).raise_for_status()  # lets CaptureState see the state
            demoted = client.post(
                "/admin/api/health/demote",
                headers=ADMIN,
                json={"endpoint": "q/broken", "reason": DEMOTE_REASON},
            )
            demoted.raise_for_status()
        assert app.state is not None
        loop.call(seed_health(app.state, time.time()))
        deadline = time.monotonic() + 10
        gw = Gateway(server.root, app.state, loop)

        def live_requests() -> (
            int
        ):  # the live traffic (the seeded history is all on p/m, in the past)
            rows = gw.api("/admin/api/endpoints/stats?windows=5m")["data"]
            return sum(
                r["windows"]["5m"]["requests"]
                for r in rows
                if r["id"] in ("q/broken", "p/m")
            )

        while live_requests() < 12:
            assert time.monotonic() < deadline, "the request log did not fill"
            time.sleep(0.05)
        yield gw
    finally:
        server.stop()
        loop.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"{CHROMIUM} is missing (scripts/test.sh installs Debian's chromium)"
        )
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, gateway: Gateway) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.dialogs = []  # type: ignore[attr-defined]
    page.console_errors = []  # type: ignore[attr-defined]
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    page.on(
        "console", lambda m: m.type == "error" and page.console_errors.append(m.text)
    )  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        context.close()


def sign_in(page: Any, gateway: Gateway) -> None:
    page.goto(gateway.root + "/admin")
    page.get_by_label("Admin key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("#overview-table tbody tr")
