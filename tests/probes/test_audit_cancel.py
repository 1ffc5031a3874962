"""An on-demand audit stops when it is stopped: a real gateway (uvicorn on loopback) runs the
tool-call suite against a slow fake upstream, with a reference endpoint (q/m) beside it;
- the admin client reads the first progress event and disconnects;
- the reference's side raises (a bug in its path), which ends the probe;
and once in-flight requests settle, no new upstream request starts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.app import create_app
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.persistence.app_helpers import ADMIN, settings

DELAY = 0.05  # seconds per upstream answer
CASES = 120  # the suite's size


class SlowUpstream:
    def __init__(self, reference_raises: bool) -> None:
        self.reference_raises = reference_raises
        self.started = 0

    async def __call__(self, request: UpstreamRequest) -> MockResponse:
        if orjson.loads(request.body)["model"] == "up-ref" and self.reference_raises:
            raise RuntimeError("a bug on the reference's side")
        self.started += 1
        await asyncio.sleep(DELAY)
        body = {"id": "x", "object": "chat.completion", "model": "up",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
        return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(body))


@pytest.fixture(params=[False, True], ids=["disconnect", "reference-raises"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[GatewayServer, SlowUpstream]]:
    upstream = SlowUpstream(reference_raises=request.param)
    deployments = [{"model": "m", "provider": "p", "upstream_model": "up"},
                   {"model": "m", "provider": "q", "upstream_model": "up-ref"}]
    config = settings(tmp_path, None, deployments=deployments, probes={"references": {"m": "q/m"}})
    loop = BackgroundLoop().start()
    server = GatewayServer(create_app(config, client_factory=lambda: MockHTTPClient(upstream)), loop)
    server.start()
    yield server, upstream
    server.stop()
    loop.stop()


def test_a_stopped_audit_sends_nothing_more(served: tuple[GatewayServer, SlowUpstream]) -> None:
    server, upstream = served
    events = []
    with httpx.Client(timeout=30) as http, http.stream(
        "POST", f"{server.root}/admin/api/probes/run", json={"endpoint": "p/m", "probes": ["toolcalls"]}, headers=ADMIN
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            events.append(json.loads(line))
            if not upstream.reference_raises and events[-1]["event"] == "progress":
                break  # and disconnect
    if upstream.reference_raises:
        (result,) = [e for e in events if e["event"] == "result"]
        assert result["verdict"] == "error" and "RuntimeError" in result["details"]["error"]
    # Requests then in flight answer within DELAY; give the cancel ten times that.
    time.sleep(10 * DELAY)
    settled = upstream.started
    # Left running, the suite would start about concurrency / DELAY = 80 requests a second.
    time.sleep(20 * DELAY)
    assert upstream.started == settled < CASES
