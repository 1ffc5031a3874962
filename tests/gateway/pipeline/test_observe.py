"""The one way back from a request: every peer hears the same events in the same order (dispatch
emits the attempts, the stream stage a committed stream's break, the accountant `finished`);
the breaker's feedback is one of those peers, and the HTTP edge no longer touches the breaker."""

from __future__ import annotations

import inspect
import random
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.catalog import Endpoint
from gateway.http import openai_routes
from gateway.pipeline.account import Accountant
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.observe import Observers, RequestObserver
from gateway.pipeline.outcome import Streaming
from gateway.pipeline.stream import relay
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.breaker_feedback import BreakerFeedback
from gateway.routing.order import Ordering
from gateway.routing.settings import BreakerConfig
from kernel.errors import ProviderRejected, ProviderServerError, ProviderStreamError
from kernel.records import RequestRecord
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.clock import FakeClock
from tests.gateway.persistence.app_helpers import USER, settings
from tests.gateway.pipeline.test_dispatch import RETRY, TIMEOUTS, A, B, Upstreams, chunk, context, error, ok, sse


class Recorder:
    """A peer that writes down what it hears."""

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self.log = name, log

    def request_started(self, ctx: RequestContext) -> None:
        self.log.append((self.name, "request_started"))

    def attempt_started(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        self.log.append((self.name, "attempt_started", endpoint.id))

    def attempt_committed(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        self.log.append((self.name, "attempt_committed", endpoint.id, ctx.committed))

    def attempt_failed(self, ctx: RequestContext, endpoint: Endpoint, now: float, error: BaseException) -> None:
        self.log.append((self.name, "attempt_failed", endpoint.id, type(error).__name__, ctx.committed))

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        self.log.append((self.name, "finished", record.status if record else None))


def peers(log: list[tuple[Any, ...]]) -> tuple[Observers, list[RequestObserver]]:
    members: list[RequestObserver] = [Recorder("one", log), Recorder("two", log)]
    return Observers(members), members


async def test_every_peer_hears_every_event_in_order() -> None:
    log: list[tuple[Any, ...]] = []
    feedback, _ = peers(log)
    clock = FakeClock()
    upstreams = Upstreams({"a": [error(500)], "b": [ok()]})
    retry = RETRY.model_copy(update={"attempts_per_endpoint": 1})
    dispatcher = Dispatcher(MockHTTPClient(upstreams), retry, TIMEOUTS, clock=clock, rng=random.Random(1),
                            sleep=clock.sleep, observer=feedback)
    ctx = context()
    await dispatcher.dispatch(ctx, Ordering((A, B)))
    Accountant({}.get, clock, feedback).record(ctx)
    events = [
        ("request_started",),
        ("attempt_started", "a/m"),
        ("attempt_failed", "a/m", "ProviderServerError", False),
        ("attempt_started", "b/m"),
        ("attempt_committed", "b/m", True),
        ("finished", 200),
    ]
    assert log == [(name, *event) for event in events for name in ("one", "two")]


async def test_a_committed_stream_that_breaks_is_an_attempt_failure_after_commit() -> None:
    log: list[tuple[Any, ...]] = []
    feedback, _ = peers(log)
    clock = FakeClock()
    upstreams = Upstreams({"a": [sse(chunk("he"), ProviderStreamError("reset mid-stream", endpoint="a/m"))]})
    dispatcher = Dispatcher(MockHTTPClient(upstreams), RETRY, TIMEOUTS, clock=clock, rng=random.Random(1),
                            sleep=clock.sleep, observer=feedback)
    ctx = context(stream=True)
    result = await dispatcher.dispatch(ctx, Ordering((A,)))
    assert isinstance(result, Streaming)
    log.clear()
    stream = relay(ctx, result, error_event=lambda exc: b"error",
                   on_failure=lambda exc: feedback.attempt_failed(ctx, A, clock(), exc), on_finish=lambda c: None)
    assert [part async for part in stream][-1] == b"error"
    assert [e for e in log if e[0] == "one"] == [("one", "attempt_failed", "a/m", "ProviderStreamError", True)]


def test_breaker_feedback() -> None:
    breaker = CircuitBreaker(BreakerConfig(min_requests=1, failure_rate=0.5, open_seconds=30))
    fb = BreakerFeedback(breaker)
    ctx = RequestContext(request_id="r", op="chat", started=0.0)
    refused = ProviderRejected("bad request", endpoint="a/m")
    fb.attempt_started(ctx, A, 1.0)
    fb.attempt_failed(ctx, A, 1.0, refused)  # the request's fault, not the endpoint's
    fb.attempt_failed(ctx, A, 1.0, KeyError("not an upstream failure"))
    assert breaker.state("a/m", 1.0) == "closed"
    fb.attempt_failed(ctx, A, 1.0, ProviderServerError("boom", endpoint="a/m", retry_after=7.0))
    assert breaker.state("a/m", 1.0) == "open" and breaker.blocked_until("a/m") == pytest.approx(8.0)
    ctx_b = RequestContext(request_id="s", op="chat", started=0.0)
    fb.attempt_committed(ctx_b, B, 2.0)
    ctx_b.committed = True
    assert breaker.state("b/m", 2.0) == "closed"
    # After commit any upstream failure counts, as it always did at the stream stage.
    fb.attempt_failed(ctx_b, B, 2.0, ProviderRejected("refused mid-stream", endpoint="b/m"))
    assert breaker.state("b/m", 2.0) == "open"


def test_the_http_edge_does_not_touch_the_breaker() -> None:
    assert "breaker" not in inspect.getsource(openai_routes)


def test_a_broken_stream_opens_the_breaker_through_the_feedback(tmp_path: Any) -> None:
    def answer(request: UpstreamRequest) -> MockResponse:
        return sse(chunk("he"), ProviderStreamError("reset mid-stream", endpoint="p/m"))

    config = settings(tmp_path, None, breaker={"min_requests": 1, "failure_rate": 0.5, "open_seconds": 60})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=body, headers=USER) as response:
            text = "".join(response.iter_text())
        assert response.status_code == 200 and "error" in text and "[DONE]" not in text
        state = client.app_state["gw"]
        assert state.breaker.state("p/m", state.clock()) == "open"
        assert state.router.shared.inflight("p/m") == 0  # routing released it at `finished`


def test_a_peer_that_names_its_events_hears_only_those() -> None:
    log: list[tuple[Any, ...]] = []

    class Finisher(Recorder):
        events = ("finished",)

    feedback = Observers([Finisher("only-finished", log), Recorder("all", log)])
    ctx = RequestContext(request_id="r", op="chat", started=0.0)
    feedback.request_started(ctx)
    feedback.attempt_started(ctx, A, 0.0)
    feedback.attempt_committed(ctx, A, 0.0)
    feedback.attempt_failed(ctx, A, 0.0, KeyError("x"))
    feedback.finished(ctx, None)
    assert [e[:2] for e in log] == [
        ("all", "request_started"),
        ("all", "attempt_started"),
        ("all", "attempt_committed"),
        ("all", "attempt_failed"),
        ("only-finished", "finished"),
        ("all", "finished"),
    ]


def test_the_apps_peers_and_the_events_each_hears(tmp_path: Any) -> None:
    from gateway.runtime import build_state

    state = build_state(settings(tmp_path, None), client=MockHTTPClient(lambda r: ok()))
    names = [type(o).__name__ for o in state.feedback.members]
    assert names == ["BreakerFeedback", "Router", "ToolCallMonitor", "Limiter", "MetricsSink"]
    assert state.dispatcher.observer is state.feedback and state.accountant.observer is state.feedback
    heard = {type(o).__name__: tuple(getattr(o, "events", ())) for o in state.feedback.members}
    assert heard["ToolCallMonitor"] == ("request_started", "finished") and heard["MetricsSink"] == ("finished",)
    assert heard["Limiter"] == ("finished",)  # settles what admission charged
