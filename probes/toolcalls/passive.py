"""The passive tool-call monitor: every live chat response whose request carried `tools` is
classified (`validator`, in a worker process: `checker`), counted per endpoint and class, and fed
to a Bernoulli CUSUM over "this response had a bad call".

The request and its schemas come from a client, who can make a healthy endpoint's calls "fail"
(a schema nothing satisfies, a prompt that asks for wrong arguments). So passive evidence never
moves an endpoint's state or routing weight: an alarm may only start an active run of the gateway's
own tool-call suite (`confirm`), whose result the probe policy judges like any probe run (SUSPECT,
and DEMOTED when its confirmatory re-run fails too). And it is counted per client key: each key
adds at most one bad step to an endpoint's statistic until that statistic is back at zero, and an
alarm needs bad responses from `min_keys` distinct keys. Confirmations are at most one at a time per
endpoint and `confirm_cooldown` apart; none for an endpoint that is demoted or pinned by an operator.

On the request path it costs one dict lookup for requests without tools; with tools, one task
when the response completes. Only counts are kept, never prompt or response content.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from probes.settings import ToolMonitorSettings
from probes.stats.cusum import BernoulliCusum
from probes.toolcalls.checker import InlineChecker, ResponseChecker
from probes.toolcalls.trace import ToolTrace
from probes.toolcalls.validator import ResponseReport

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from gateway.health_states import HealthStates
    from probes.settings import HealthSettings

log = logging.getLogger("probes.toolcalls")

SOURCE = "tool_monitor"  # the probe run's trigger


class TracedRequest(Protocol):
    """What the monitor reads of a request (`gateway.pipeline.context.RequestContext`), and its trace."""

    tool_trace: Any

    @property
    def op(self) -> str: ...

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def status(self) -> int: ...

    @property
    def endpoint_id(self) -> str | None: ...

    @property
    def key_name(self) -> str | None: ...
ANONYMOUS = ""  # the key of requests without one (open access): all of them are one client
MAX_KEYS = 1024  # distinct keys remembered per endpoint and cycle (min_keys is what counts)


@dataclass(slots=True)
class EndpointToolStats:
    responses: int = 0  # judged responses, all time
    bad: int = 0
    alarms: int = 0
    confirmations: int = 0  # active runs the alarms started
    statistic: float = 0.0  # the CUSUM now
    bad_keys: set[str] = field(default_factory=set)  # keys that added a bad step since it was last zero
    last_confirm: float | None = None
    last_confirm_concluded: bool = True  # False: that run reached no verdict, retry sooner
    since_alarm: Counter[str] = field(default_factory=Counter)  # counts by class since the last alarm
    totals: Counter[str] = field(default_factory=Counter)


class ToolCallMonitor:
    def __init__(
        self,
        health: HealthStates,
        settings: HealthSettings,
        *,
        wall: Callable[[], float],
        monitor: ToolMonitorSettings | None = None,
        checker: ResponseChecker | None = None,
        count: Callable[[str, Mapping[str, int]], None] | None = None,
        confirm: Callable[[str], Awaitable[Any]] | None = None,
    ) -> None:
        self.cusum = BernoulliCusum(settings.tool_error_baseline, settings.tool_error_alarm, settings.tool_cusum_h)
        self.settings = monitor or ToolMonitorSettings()
        self._health = health
        self._wall = wall
        self._checker = checker or InlineChecker()
        self._count = count  # the Prometheus counter, per endpoint and class
        # Starts the gateway's own tool-call suite on an endpoint (the app wires the probe runner).
        self.confirm = confirm
        self._stats: dict[str, EndpointToolStats] = {}
        self._confirming: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- request path ----------------------------------------------------------------

    # A `gateway.pipeline.observe.RequestObserver`, a peer of the others.
    events = ("request_started", "finished")

    def request_started(self, ctx: TracedRequest) -> None:
        """Once per request, before its first attempt: a trace only when the request carries tools."""
        if ctx.op == "chat" and ctx.body.get("tools"):
            ctx.tool_trace = ToolTrace()

    def attempt_started(self, ctx: TracedRequest, endpoint: Endpoint, now: float) -> None:
        return None

    def attempt_committed(self, ctx: TracedRequest, endpoint: Endpoint, now: float) -> None:
        return None

    def attempt_failed(self, ctx: TracedRequest, endpoint: Endpoint, now: float, error: BaseException) -> None:
        return None

    def finished(self, ctx: TracedRequest, record: object = None) -> None:
        """The request is over: check the completed response in the background, if traced."""
        trace = ctx.tool_trace
        if trace is None:
            return
        ctx.tool_trace = None
        if ctx.status >= 400 or ctx.endpoint_id is None:
            return  # failures are availability evidence, counted elsewhere
        try:
            response = trace.response()
        except Exception:  # monitoring must never fail the request it watches
            log.exception("tool-call monitor: could not read a response of %s", ctx.endpoint_id)
            return
        if response is None:
            return
        key = ctx.key_name or ANONYMOUS
        self._spawn(self._check(ctx.endpoint_id, key, response, ctx.body))

    async def _check(self, endpoint_id: str, key: str, response: dict[str, Any], request: dict[str, Any]) -> None:
        try:
            report = await self._checker.check(response, request)
        except Exception:
            log.exception("tool-call monitor: could not classify a response of %s", endpoint_id)
            return
        if report is None:  # not checked safely in time: no evidence either way
            self._counted(endpoint_id, Counter({"unchecked": 1}))
            return
        self.observe(endpoint_id, report, key=key)

    def observe(self, endpoint_id: str, report: ResponseReport, *, key: str = ANONYMOUS) -> bool:
        """Count one report; True when it raised an alarm."""
        stats = self._counted(endpoint_id, report.counts())
        if not report.judged or not report.informative:
            return False
        stats.responses += 1
        stats.bad += report.bad
        if report.bad:
            if key in stats.bad_keys:
                return False  # this key's bad responses are one piece of evidence, however many
            if len(stats.bad_keys) < MAX_KEYS:
                stats.bad_keys.add(key)
        h = self.cusum.h
        s = max(0.0, stats.statistic + (self.cusum.bad_step if report.bad else self.cusum.good_step))
        if s == 0.0:
            stats.bad_keys.clear()
        if s < h or len(stats.bad_keys) < self.settings.min_keys:
            stats.statistic = min(s, h)  # held at the threshold until another key confirms it
            return False
        stats.statistic = 0.0
        stats.bad_keys.clear()
        stats.alarms += 1
        self._alarm(endpoint_id, stats)
        stats.since_alarm = Counter()
        return True

    def _counted(self, endpoint_id: str, counts: Counter[str]) -> EndpointToolStats:
        stats = self._stats.get(endpoint_id)
        if stats is None:
            stats = self._stats[endpoint_id] = EndpointToolStats()
        stats.totals.update(counts)
        stats.since_alarm.update(counts)
        if self._count is not None and counts:
            self._count(endpoint_id, counts)
        return stats

    def _alarm(self, endpoint_id: str, stats: EndpointToolStats) -> None:
        counts = dict(stats.since_alarm)
        entry = self._health.get(endpoint_id)
        now = self._wall()
        why = None
        if self.confirm is None:
            why = "no probe runner"
        elif entry.manual or entry.state == "demoted":
            why = f"the endpoint is {'pinned' if entry.manual else 'demoted'}"
        elif endpoint_id in self._confirming:
            why = "a confirmation is running"
        elif stats.last_confirm is not None and now - stats.last_confirm < self._cooldown(stats):
            why = "the last confirmation was too recent"
        if why is not None:
            log.warning("tool-call CUSUM alarm on %s (%s); no confirmation: %s", endpoint_id, counts, why)
            return
        log.warning("tool-call CUSUM alarm on %s (%s): running the tool-call suite to confirm", endpoint_id, counts)
        stats.last_confirm = now
        stats.last_confirm_concluded = True
        stats.confirmations += 1
        self._confirming.add(endpoint_id)
        self._spawn(self._confirm(endpoint_id, stats))

    def _cooldown(self, stats: EndpointToolStats) -> float:
        s = self.settings
        return s.confirm_cooldown if stats.last_confirm_concluded else min(s.confirm_retry, s.confirm_cooldown)

    async def _confirm(self, endpoint_id: str, stats: EndpointToolStats) -> None:
        assert self.confirm is not None
        concluded = False
        try:
            concluded = reached_a_verdict(await self.confirm(endpoint_id))
        except Exception:
            log.exception("tool-call monitor: the confirmation run on %s failed", endpoint_id)
        finally:
            self._confirming.discard(endpoint_id)
            stats.last_confirm_concluded = concluded

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- reading and shutdown -----------------------------------------------------------

    def stats(self, endpoint_id: str) -> EndpointToolStats:
        return self._stats.get(endpoint_id) or EndpointToolStats()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {
            ep: {
                "responses": s.responses,
                "bad": s.bad,
                "alarms": s.alarms,
                "confirmations": s.confirmations,
                "statistic": s.statistic,
                "counts": dict(s.totals),
            }
            for ep, s in self._stats.items()
        }

    async def settle(self) -> None:
        """Wait for the checks and confirmations in flight (tests, and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the checks in flight and the worker (the lifespan calls this before closing the database)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._checker.aclose()


def reached_a_verdict(report: object) -> bool:
    """Whether a confirmation run (the runner's RunReport) judged the endpoint: some probe in it
    passed or failed. A run that only errored or was inconclusive says nothing either way."""
    rounds = getattr(report, "rounds", None)
    if rounds is None:
        return True  # a confirm callable that reports nothing: take it as done
    return any(r.verdict in ("pass", "fail") for rnd in rounds for r in rnd.results)
