"""Probe traffic looks like user traffic on the wire: a gateway (real HTTP client) in front of a fake
upstream that records what it receives; a user's request through routing and a probe's request for
the same body arrive with the same header set and the same bytes, and nothing names a probe."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.catalog import Endpoint
from gateway.state import AppState
from gateway.tracing.settings import TracingConfig
from probes.base import Effect, ProbeContext, ProbeResult
from probes.registry import ProbeRegistry
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop
from tests.gateway.persistence.app_helpers import ADMIN, USER, settings

BODY: dict[str, Any] = {
    "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    "max_tokens": 3,
    "temperature": 0,
    "logprobs": True,
    "top_logprobs": 5,
}


class SendsBody:
    name: ClassVar[str] = "logprob_drift"
    effect: ClassVar[Effect] = "evidence"

    def applicable(self, endpoint: Endpoint) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        await ctx.client.chat(dict(BODY))
        return ProbeResult(self.name, "pass", 1, p_value=0.5, effect=self.effect)


@pytest.fixture
def upstream() -> Iterator[FakeOpenAIUpstream]:
    loop = BackgroundLoop().start()
    fake = FakeOpenAIUpstream()
    loop.call(fake.start())
    yield fake
    loop.call(fake.stop())
    loop.stop()


@pytest.fixture(params=["tracing off", "tracing on"])
def client(request: pytest.FixtureRequest, tmp_path: Path, upstream: FakeOpenAIUpstream) -> Iterator[TestClient]:
    # With tracing on, a user's request carries a `traceparent` upstream: a probe's without one stood out.
    config = settings(tmp_path, None)
    providers = [{**p.model_dump(), "base_url": upstream.url} for p in config.providers]
    update: dict[str, Any] = {"providers": type(config.providers)(
        type(config.providers[0]).model_validate(p) for p in providers)}  # fmt: skip
    exporter = None
    if request.param == "tracing on":
        update["tracing"] = TracingConfig(enabled=True, sample_ratio=0.5)
        exporter = InMemorySpanExporter()
    app = create_app(config.model_copy(update=update), span_exporter=exporter)
    with TestClient(app) as c:
        state: AppState = c.app_state["gw"]
        state.probes.registry = ProbeRegistry({"logprob_drift": SendsBody}, suites={"quality": ("logprob_drift",)})
        yield c


def test_a_probe_request_is_shaped_like_a_user_request(
    client: TestClient, upstream: FakeOpenAIUpstream, request: pytest.FixtureRequest
) -> None:
    user = client.post("/v1/chat/completions", json={"model": "m", **BODY}, headers=USER)
    assert user.status_code == 200, user.text
    with client.stream("POST", "/admin/api/probes/run", json={"endpoint": "p/m"}, headers=ADMIN) as response:
        assert response.status_code == 200
        list(response.iter_lines())
    from_user, from_probe = upstream.requests_for("up")
    assert from_probe.path == from_user.path
    assert sorted(from_probe.headers) == sorted(from_user.headers)
    traced = {k: v for k, v in from_probe.headers.items() if k != "traceparent"}
    assert traced == {k: v for k, v in from_user.headers.items() if k != "traceparent"}  # values too
    traced_on = request.node.callspec.params["client"] == "tracing on"
    assert ("traceparent" in from_user.headers) is traced_on
    if traced_on:  # a trace of its own, in the same W3C form
        form = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
        assert form.fullmatch(from_probe.headers["traceparent"]) and form.fullmatch(from_user.headers["traceparent"])
        assert from_probe.headers["traceparent"][3:35] != from_user.headers["traceparent"][3:35]
    # The same bytes, but for the cache key's hash, which routing derives from the API key's name (each
    # user's differs; a probe's is one more, in the same format): the same layout, the same length.
    key = re.compile(rb'"prompt_cache_key":"gw-[0-9a-f]{16}"')
    assert key.search(from_user.raw) and key.search(from_probe.raw)
    assert key.sub(b"KEY", from_probe.raw) == key.sub(b"KEY", from_user.raw), (from_probe.raw, from_user.raw)
    tells = [f"{k}: {v}" for k, v in from_probe.headers.items() if "probe" in k.lower() or "probe" in v.lower()]
    assert tells == [] and b"probe" not in from_probe.raw.lower()
