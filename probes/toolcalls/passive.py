"""The passive tool-call monitor: every live chat response whose request carried `tools` is
classified (`validator`), counted per endpoint and class, and fed to a Bernoulli CUSUM over
"this response had a bad call". An alarm moves a healthy endpoint to SUSPECT (one on probation
back to DEMOTED) and stores the transition in the background.

On the request path it costs one dict lookup for requests without tools; with tools, one
classification when the response completes. No I/O there: persistence runs as a task. Only
counts are kept, never prompt or response content.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from probes.stats.cusum import BernoulliCusum
from probes.toolcalls.trace import ToolTrace
from probes.toolcalls.validator import ResponseReport, SchemaCache, ToolSpec, classify_response

if TYPE_CHECKING:
    from gateway.health_states import HealthState, HealthStates, Transition
    from gateway.pipeline.context import RequestContext
    from probes.settings import HealthSettings

log = logging.getLogger("probes.toolcalls")

SOURCE = "tool_monitor"
# Where an alarm sends an endpoint from each state; suspect and demoted ones stay put.
ALARM_MOVES: Mapping[str, HealthState] = {"healthy": "suspect", "probation": "demoted"}


@dataclass(slots=True)
class EndpointToolStats:
    responses: int = 0  # judged responses, all time
    bad: int = 0
    alarms: int = 0
    statistic: float = 0.0  # the CUSUM now
    since_alarm: Counter[str] = field(default_factory=Counter)  # counts by class since the last alarm
    totals: Counter[str] = field(default_factory=Counter)


class ToolCallMonitor:
    def __init__(
        self,
        health: HealthStates,
        settings: HealthSettings,
        *,
        wall: Callable[[], float],
        persist: Callable[[Transition], Awaitable[bool]] | None = None,
        count: Callable[[str, Mapping[str, int]], None] | None = None,
        schemas: SchemaCache | None = None,
    ) -> None:
        self.cusum = BernoulliCusum(settings.tool_error_baseline, settings.tool_error_alarm, settings.tool_cusum_h)
        self._health = health
        self._wall = wall
        self._persist = persist
        self._count = count  # the Prometheus counter, per endpoint and class
        self._schemas = schemas or SchemaCache()
        self._stats: dict[str, EndpointToolStats] = {}
        self._tasks: set[asyncio.Task[bool]] = set()

    # -- request path ----------------------------------------------------------------

    def start(self, ctx: RequestContext) -> None:
        """Dispatch calls this once per request: a trace only when the request carries tools."""
        if ctx.op == "chat" and ctx.body.get("tools"):
            ctx.tool_trace = ToolTrace()

    def finished(self, ctx: RequestContext) -> None:
        """The accountant's observer: classify the completed response, if it was traced."""
        trace = ctx.tool_trace
        if trace is None:
            return
        ctx.tool_trace = None
        if ctx.status >= 400 or ctx.endpoint_id is None:
            return  # failures are availability evidence, counted elsewhere
        try:
            response = trace.response()
            if response is None:
                return
            report = classify_response(response, ToolSpec.from_request(ctx.body), self._schemas)
            self.observe(ctx.endpoint_id, report)
        except Exception:  # monitoring must never fail the request it watches
            log.exception("tool-call monitor: could not classify a response of %s", ctx.endpoint_id)

    def observe(self, endpoint_id: str, report: ResponseReport) -> Transition | None:
        stats = self._stats.get(endpoint_id)
        if stats is None:
            stats = self._stats[endpoint_id] = EndpointToolStats()
        counts = report.counts()
        stats.totals.update(counts)
        stats.since_alarm.update(counts)
        if self._count is not None and counts:
            self._count(endpoint_id, counts)
        if not report.judged:
            return None
        stats.responses += 1
        stats.bad += report.bad
        stats.statistic, alarm = self.cusum.step(stats.statistic, report.bad)
        if not alarm:
            return None
        stats.alarms += 1
        transition = self._alarm(endpoint_id, stats)
        stats.since_alarm = Counter()
        return transition

    def _alarm(self, endpoint_id: str, stats: EndpointToolStats) -> Transition | None:
        target = ALARM_MOVES.get(self._health.state(endpoint_id))
        log.warning("tool-call error CUSUM alarm on %s (%s)", endpoint_id, dict(stats.since_alarm))
        if target is None:
            return None
        bad = ", ".join(f"{k} {v}" for k, v in sorted(stats.since_alarm.items()) if k not in ("ok", "truncated"))
        transition = self._health.transition(
            endpoint_id,
            target,
            source=SOURCE,
            reason=f"tool-call error rate above {self.cusum.p0:.1%} (CUSUM alarm; {bad})",
            at=self._wall(),
            evidence={
                "counts": dict(stats.since_alarm),
                "responses": stats.responses,
                "bad_responses": stats.bad,
                "p0": self.cusum.p0,
                "p1": self.cusum.p1,
                "h": self.cusum.h,
            },
        )
        if transition is not None and self._persist is not None:
            task = asyncio.get_running_loop().create_task(self._persist(transition))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return transition

    # -- reading and shutdown -----------------------------------------------------------

    def stats(self, endpoint_id: str) -> EndpointToolStats:
        return self._stats.get(endpoint_id) or EndpointToolStats()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {
            ep: {
                "responses": s.responses,
                "bad": s.bad,
                "alarms": s.alarms,
                "statistic": s.statistic,
                "counts": dict(s.totals),
            }
            for ep, s in self._stats.items()
        }

    async def aclose(self) -> None:
        """Wait for transitions still being stored (the lifespan calls this before closing the database)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
