"""The passive monitor on its own: counts, per-key CUSUM alarms that only start an active
confirmation (never a state change), the cooldown, and nothing at all for requests without tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.health_states import HealthStates
from gateway.pipeline.context import RequestContext
from probes.settings import HealthSettings, ToolMonitorSettings
from probes.toolcalls.passive import ToolCallMonitor
from probes.toolcalls.validator import ResponseReport
from tests.probes.toolcalls.test_validator import REQUEST, call, response

GOOD = json.dumps(response(call("get_weather", '{"city": "Paris"}'))).encode()
BAD = json.dumps(response(call("get_weather", '{"city": "Pa'))).encode()
# The audit's attack: a schema nothing satisfies makes every honest call a "schema_mismatch".
UNSATISFIABLE = {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "not": {}}}}]}


class Recorder:
    def __init__(self) -> None:
        self.confirmed: list[str] = []
        self.counts: list[tuple[str, dict[str, int]]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def confirm(self, endpoint_id: str) -> None:
        self.confirmed.append(endpoint_id)
        await self.release.wait()  # a confirmation run takes a while

    def count(self, endpoint_id: str, counts: Mapping[str, int]) -> None:
        self.counts.append((endpoint_id, dict(counts)))


def monitor(health: HealthStates, rec: Recorder, **settings: Any) -> ToolCallMonitor:
    return ToolCallMonitor(
        health,
        HealthSettings(),
        wall=lambda: 1_700_000_000.0,
        monitor=ToolMonitorSettings(**settings),
        count=rec.count,
        confirm=rec.confirm,
    )


async def finish(
    mon: ToolCallMonitor,
    body: bytes,
    *,
    tools: bool = True,
    status: int = 200,
    ep: str = "ep-1",
    key: str | None = "key-a",
    request: Mapping[str, Any] = REQUEST,
) -> RequestContext:
    ctx = RequestContext("r", "chat", 0.0, key_name=key, body={"model": "m", **(request if tools else {})})
    mon.request_started(ctx)
    if ctx.tool_trace is not None:
        ctx.tool_trace.feed_body(body)
    ctx.endpoint_id, ctx.status = ep, status
    mon.finished(ctx)
    await mon.settle()
    return ctx


async def test_requests_without_tools_get_no_trace_and_no_counts() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    ctx = await finish(mon, BAD, tools=False)
    assert ctx.tool_trace is None
    assert rec.counts == [] and mon.snapshot() == {}


async def test_counts_by_class_without_content() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    await finish(mon, GOOD)
    await finish(mon, BAD)
    await finish(mon, BAD, status=502)  # failed requests are availability evidence, not tool evidence
    assert rec.counts == [("ep-1", {"ok": 1}), ("ep-1", {"invalid_json": 1})]
    snap = mon.snapshot()["ep-1"]
    assert snap["responses"] == 2 and snap["bad"] == 1 and snap["counts"] == {"ok": 1, "invalid_json": 1}
    assert "Paris" not in repr(snap) and "Pa" not in json.dumps(snap["counts"])


async def test_clean_traffic_stays_healthy() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for _ in range(2000):
        await finish(mon, GOOD)
    assert health.state("ep-1") == "healthy"
    assert mon.stats("ep-1").alarms == 0 and mon.stats("ep-1").statistic == 0.0


async def test_a_thousand_hostile_requests_from_one_key_move_nothing() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for i in range(1000):
        await finish(mon, BAD if i % 2 else GOOD, key="attacker")  # 50% "bad", every one from the same key
    for _ in range(1000):  # the published attack: an unsatisfiable schema against honest calls
        await finish(mon, GOOD, key="attacker", request=UNSATISFIABLE)
    stats = mon.stats("ep-1")
    assert stats.bad == 500 and stats.totals["unchecked"] == 1000  # all counted...
    assert stats.alarms == 0 and rec.confirmed == []  # ...as one piece of evidence: no alarm
    assert stats.statistic < mon.cusum.h
    assert health.state("ep-1") == "healthy" and health.get("ep-1").since == 0.0  # never transitioned


async def test_unsatisfiable_schemas_from_many_keys_are_not_evidence() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for i in range(200):
        await finish(mon, GOOD, key=f"key-{i}", request=UNSATISFIABLE)
    assert mon.stats("ep-1").bad == 0 and mon.stats("ep-1").totals == {"unchecked": 200}
    assert rec.confirmed == [] and health.state("ep-1") == "healthy"


async def test_bad_responses_from_two_keys_start_a_confirmation_and_move_no_state() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for _ in range(200):
        await finish(mon, GOOD)
    await finish(mon, BAD, key="key-a")
    await finish(mon, BAD, key="key-a")  # the same key again: no second step
    assert rec.confirmed == [] and mon.stats("ep-1").statistic < mon.cusum.h
    await finish(mon, BAD, key="key-b")
    assert rec.confirmed == ["ep-1"]
    stats = mon.stats("ep-1")
    assert stats.alarms == 1 and stats.confirmations == 1 and stats.statistic == 0.0
    assert health.state("ep-1") == "healthy"  # the active suite decides, not this monitor
    assert health.state("ep-2") == "healthy" and mon.stats("ep-2").responses == 0


async def bad_from_two_keys(mon: ToolCallMonitor, tag: str, wait: Callable[[], Awaitable[None]]) -> None:
    """One bad response on ep-1 from each of two keys: enough for an alarm."""
    for key in (f"{tag}-a", f"{tag}-b"):
        ctx = RequestContext("r", "chat", 0.0, key_name=key, body={"model": "m", **REQUEST})
        mon.request_started(ctx)
        assert ctx.tool_trace is not None
        ctx.tool_trace.feed_body(BAD)
        ctx.endpoint_id = "ep-1"
        mon.finished(ctx)
        await wait()


async def test_one_confirmation_at_a_time_and_a_cooldown_between_them() -> None:
    health, rec = HealthStates(), Recorder()
    rec.release.clear()  # the first confirmation keeps running
    now = [1_700_000_000.0]
    mon = ToolCallMonitor(
        health, HealthSettings(), wall=lambda: now[0], monitor=ToolMonitorSettings(confirm_cooldown=600),
        confirm=rec.confirm,
    )

    async def alarm(tag: str) -> None:  # the first confirmation blocks: settle() would wait for it
        await bad_from_two_keys(mon, tag, lambda: asyncio.sleep(0.01))

    await alarm("one")
    assert rec.confirmed == ["ep-1"]
    await alarm("two")  # the first is still running
    assert rec.confirmed == ["ep-1"] and mon.stats("ep-1").alarms == 2
    rec.release.set()
    await mon.settle()
    now[0] += 60
    await alarm("three")  # within the cooldown of the first
    assert rec.confirmed == ["ep-1"] and mon.stats("ep-1").alarms == 3
    now[0] += 600
    await alarm("four")
    await mon.settle()
    assert rec.confirmed == ["ep-1", "ep-1"]


async def test_no_confirmation_for_demoted_or_pinned_endpoints() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    await health.transition("ep-1", "demoted", source="probes", reason="test", at=0.0)
    await health.transition("ep-2", "suspect", source="manual", reason="op", at=0.0, operator=True)
    await health.transition("ep-3", "probation", source="probes", reason="test", at=0.0)
    for ep in ("ep-1", "ep-2", "ep-3"):
        for key in ("a", "b"):
            await finish(mon, BAD, ep=ep, key=key)
    assert rec.confirmed == ["ep-3"]  # probation: the suite is run, and the policy sends it back if it fails
    assert health.state("ep-1") == "demoted" and health.get("ep-2").manual and health.state("ep-3") == "probation"


async def test_without_a_key_all_traffic_is_one_client() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    for _ in range(50):
        await finish(mon, BAD, key=None)
    assert mon.stats("ep-1").alarms == 0 and rec.confirmed == []


async def test_truncated_responses_are_counted_but_not_judged() -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    cut = json.dumps(response(call("get_weather", '{"ci'), finish="length")).encode()
    for _ in range(10):
        await finish(mon, cut)
    stats: Any = mon.stats("ep-1")
    assert stats.responses == 0 and stats.totals == {"truncated": 10}
    assert health.state("ep-1") == "healthy"


async def test_a_response_the_checker_could_not_check_is_counted_unchecked() -> None:
    class GivesUp:
        async def check(self, response: Any, request: Any) -> ResponseReport | None:
            return None  # past its deadline, or too many waiting

        async def aclose(self) -> None:
            return None

    health, rec = HealthStates(), Recorder()
    mon = ToolCallMonitor(health, HealthSettings(), wall=lambda: 0.0, checker=GivesUp(), count=rec.count)
    await finish(mon, BAD)
    assert rec.counts == [("ep-1", {"unchecked": 1})] and mon.stats("ep-1").responses == 0


async def test_a_classification_failure_never_reaches_the_request(caplog: Any) -> None:
    health, rec = HealthStates(), Recorder()
    mon = monitor(health, rec)
    ctx = RequestContext("r", "chat", 0.0, body={"model": "m", **REQUEST})
    mon.request_started(ctx)

    class Exploding:
        def response(self) -> dict[str, Any]:
            raise RuntimeError("boom")

    ctx.tool_trace, ctx.endpoint_id = Exploding(), "ep-1"
    mon.finished(ctx)  # logged, not raised
    assert ctx.tool_trace is None and "could not read" in caplog.text


async def test_a_confirmation_that_reached_no_verdict_holds_off_the_next_only_briefly() -> None:
    from types import SimpleNamespace

    verdicts = ["error", "pass"]  # the first run could not judge (its upstream failed); the second did
    confirmed: list[str] = []

    async def confirm(endpoint_id: str) -> object:
        confirmed.append(endpoint_id)
        result = SimpleNamespace(verdict=verdicts[len(confirmed) - 1])
        return SimpleNamespace(rounds=[SimpleNamespace(results=[result])])

    now = [1_700_000_000.0]
    mon = ToolCallMonitor(
        HealthStates(), HealthSettings(), wall=lambda: now[0],
        monitor=ToolMonitorSettings(confirm_cooldown=600, confirm_retry=30), confirm=confirm,
    )

    async def alarm(tag: str) -> None:
        await bad_from_two_keys(mon, tag, mon.settle)

    await alarm("one")
    assert confirmed == ["ep-1"]
    now[0] += 60  # past confirm_retry, well within the cooldown: the errored run said nothing
    await alarm("two")
    assert confirmed == ["ep-1", "ep-1"]
    now[0] += 60  # the second run judged the endpoint: now the full cooldown holds
    await alarm("three")
    assert confirmed == ["ep-1", "ep-1"] and mon.stats("ep-1").alarms == 3
