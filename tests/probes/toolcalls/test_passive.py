"""The passive monitor on its own: counts, CUSUM alarms, the health transition and its background
persistence, and nothing at all for requests without tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from gateway.health_states import HealthStates, Transition
from gateway.pipeline.context import RequestContext
from probes.settings import HealthSettings
from probes.toolcalls.passive import ToolCallMonitor
from tests.probes.toolcalls.test_validator import REQUEST, call, response

GOOD = json.dumps(response(call("get_weather", '{"city": "Paris"}'))).encode()
BAD = json.dumps(response(call("get_weather", '{"city": "Pa'))).encode()


class Recorder:
    def __init__(self) -> None:
        self.stored: list[Transition] = []
        self.counts: list[tuple[str, dict[str, int]]] = []
        self.release = asyncio.Event()

    async def persist(self, t: Transition) -> bool:
        await self.release.wait()  # a slow database: the request path must not wait for it
        self.stored.append(t)
        return True

    def count(self, endpoint_id: str, counts: Mapping[str, int]) -> None:
        self.counts.append((endpoint_id, dict(counts)))


def monitor(health: HealthStates, rec: Recorder) -> ToolCallMonitor:
    return ToolCallMonitor(
        health, HealthSettings(), wall=lambda: 1_700_000_000.0, persist=rec.persist, count=rec.count
    )


def finish(mon: ToolCallMonitor, body: bytes, *, tools: bool = True, status: int = 200, ep: str = "ep-1") -> RequestContext:
    ctx = RequestContext("r", "chat", 0.0, body={"model": "m", **(REQUEST if tools else {})})
    mon.start(ctx)
    if ctx.tool_trace is not None:
        ctx.tool_trace.feed_body(body)
    ctx.endpoint_id, ctx.status = ep, status
    mon.finished(ctx)
    return ctx


async def test_requests_without_tools_get_no_trace_and_no_counts() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    ctx = finish(mon, BAD, tools=False)
    assert ctx.tool_trace is None
    assert rec.counts == [] and mon.snapshot() == {}


async def test_counts_by_class_without_content() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    finish(mon, GOOD)
    finish(mon, BAD)
    finish(mon, BAD, status=502)  # failed requests are availability evidence, not tool evidence
    assert rec.counts == [("ep-1", {"ok": 1}), ("ep-1", {"invalid_json": 1})]
    snap = mon.snapshot()["ep-1"]
    assert snap["responses"] == 2 and snap["bad"] == 1 and snap["counts"] == {"ok": 1, "invalid_json": 1}
    assert "Paris" not in repr(snap) and "Pa" not in json.dumps(snap["counts"])


async def test_clean_traffic_stays_healthy() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for _ in range(2000):
        finish(mon, GOOD)
    assert health.state("ep-1") == "healthy"
    assert mon.stats("ep-1").alarms == 0 and mon.stats("ep-1").statistic == 0.0


async def test_a_rising_error_rate_makes_the_endpoint_suspect_and_is_stored_in_the_background() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for _ in range(200):
        finish(mon, GOOD)
    assert health.state("ep-1") == "healthy"
    sent = 0
    while health.state("ep-1") == "healthy":
        sent += 1
        assert sent < 200, "a 20% error rate must alarm well within 200 responses"
        finish(mon, BAD if sent % 5 == 0 else GOOD)
    entry = health.get("ep-1")
    assert entry.state == "suspect" and entry.source == "tool_monitor"
    assert "invalid_json" in entry.reason
    assert rec.stored == []  # scheduled, not awaited on the request path
    rec.release.set()
    await mon.aclose()
    (stored,) = rec.stored
    assert stored.to_state == "suspect" and stored.evidence is not None
    assert stored.evidence["counts"]["invalid_json"] >= 2 and stored.evidence["p0"] == 0.002
    assert health.state("ep-2") == "healthy"  # other endpoints are untouched


async def test_alarm_sends_probation_back_to_demoted_and_leaves_demoted_alone() -> None:
    health, rec = HealthStates(), Recorder()
    rec.release.set()
    mon = monitor(health, rec)
    health.transition("ep-1", "probation", source="probes", reason="test", at=0.0)
    health.transition("ep-2", "demoted", source="probes", reason="test", at=0.0)
    for _ in range(3):
        finish(mon, BAD, ep="ep-1")
        finish(mon, BAD, ep="ep-2")
    await mon.aclose()
    assert health.state("ep-1") == "demoted"
    assert health.get("ep-2").source == "probes"  # no transition from demoted
    assert mon.stats("ep-2").alarms >= 1
    assert [t.endpoint_id for t in rec.stored] == ["ep-1"]


async def test_a_manual_pin_is_respected() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    health.transition("ep-1", "suspect", source="manual", reason="op", at=0.0, operator=True)
    for _ in range(4):
        finish(mon, BAD)
    assert health.get("ep-1").manual and rec.stored == []


async def test_truncated_responses_are_counted_but_not_judged() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    cut = json.dumps(response(call("get_weather", '{"ci'), finish="length")).encode()
    for _ in range(10):
        finish(mon, cut)
    stats: Any = mon.stats("ep-1")
    assert stats.responses == 0 and stats.totals == {"truncated": 10}
    assert health.state("ep-1") == "healthy"


async def test_a_classification_failure_never_reaches_the_request(caplog: Any) -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    ctx = RequestContext("r", "chat", 0.0, body={"model": "m", **REQUEST})
    mon.start(ctx)

    class Exploding:
        def response(self) -> dict[str, Any]:
            raise RuntimeError("boom")

    ctx.tool_trace, ctx.endpoint_id = Exploding(), "ep-1"
    mon.finished(ctx)  # logged, not raised
    assert ctx.tool_trace is None and "could not classify" in caplog.text
