"""When each probe runs on each endpoint: per (probe, endpoint) next-run times with jitter, demoted
endpoints probed `demoted_slowdown` times less often, and a lease per (probe, endpoint) in the
shared state store so that with several gateway replicas each scheduled run happens once.

The lease is held for most of the interval and not released after the run: another replica whose
own schedule comes due meanwhile finds it taken and skips; the holder renews it at its next run;
if the holder dies the lease expires and another replica takes over. A run that outlasts the lease
(an audit may take `probes.audit.seconds`) renews it while it runs, so the lease itself stays
sized by the interval: a replica restarted under a new name waits no longer for it. A store outage
longer than two thirds of the lease lets it lapse during a run (as one at the start lets the run go
ahead without it): better a duplicate run than none. Clock, sleep and RNG are injected; the sleep
must suspend (the renewal loops on it). Nothing a run does (an unreachable endpoint, a store
outage, a probe's bug) stops the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from gateway.health_states import HealthStates
from gateway.state_store import StoreUnavailable
from kernel.tasks import Heartbeat, cancel_and_wait, run_forever
from probes.runner import ProbeRunner
from probes.settings import AUDIT_MARGIN_S, ProbeSettings
from probes.tasks import cancel_all

log = logging.getLogger("gateway.probes")

MAX_SLEEP = 60.0  # wake at least this often (a catalog or state change is picked up by then)
# No progress (a job done, a round ended) for this long: the scheduler is stuck (/readyz says so).
SCHEDULER_LIMIT_S = 900.0
RENEW_RETRY_S = 10.0  # how soon a lease renewal the store failed is tried again


def scheduler_limit_s(settings: ProbeSettings) -> float:
    """The liveness limit: the scheduler beats before and after each job, and a job is one audit."""
    return max(SCHEDULER_LIMIT_S, settings.audit.seconds + AUDIT_MARGIN_S)


class Lease(Protocol):
    async def lease_acquire(self, key: str, owner: str, ttl_s: float) -> bool: ...

    async def lease_release(self, key: str, owner: str) -> None: ...


Job = tuple[str, str]  # (probe, endpoint id)


def lease_key(job: Job) -> str:
    return f"probe:{job[0]}:{job[1]}"


class ProbeScheduler:
    def __init__(
        self,
        runner: ProbeRunner,
        settings: ProbeSettings,
        health: HealthStates,
        lease: Lease,
        *,
        endpoints: Iterable[str],
        owner: str,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        beat: Heartbeat | None = None,
    ) -> None:
        self.runner = runner
        # Beats after every job and every round: a probe run that hangs makes /readyz say so.
        self.beat = beat or Heartbeat("probe scheduler", scheduler_limit_s(settings), log=log)
        self.settings = settings
        self.health = health
        self.lease = lease
        self.owner = owner
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random(settings.seed)
        known = set(runner.registry.names())
        probes = [p for p in settings.intervals if p in known]
        now = clock()
        # The first run of each job lands anywhere in its first interval: no burst at start-up.
        self.next_run: dict[Job, float] = {
            (p, ep): now + self.rng.uniform(0, settings.intervals[p]) for ep in endpoints for p in probes
        }
        self.runs = 0
        self.skipped = 0  # another replica held the lease
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def interval(self, probe: str, endpoint_id: str) -> float:
        base = self.settings.intervals[probe]
        return base * self.settings.demoted_slowdown if self.health.state(endpoint_id) == "demoted" else base

    def _reschedule(self, job: Job, now: float) -> None:
        spread = self.settings.jitter
        self.next_run[job] = now + self.interval(*job) * (1.0 + self.rng.uniform(-spread, spread))

    def due(self, now: float) -> list[Job]:
        return sorted((job for job, at in self.next_run.items() if at <= now), key=lambda j: self.next_run[j])

    async def _take(self, job: Job, hold: float) -> bool:
        probe, endpoint_id = job
        try:
            return await self.lease.lease_acquire(lease_key(job), self.owner, hold)
        except StoreUnavailable as exc:  # better a duplicate run than none
            log.warning("probes: lease store unavailable (%s); running %s on %s anyway", exc, probe, endpoint_id)
            return True

    async def _run(self, job: Job, hold: float) -> None:
        """The job's run, its lease renewed while it lasts."""
        probe, endpoint_id = job
        stop = asyncio.Event()  # ends the renewal even where a store call drops its cancellation
        renewing = asyncio.get_running_loop().create_task(
            self._renew(job, hold, stop), name=f"lease-{probe}-{endpoint_id}"
        )
        try:
            await self.runner.run(endpoint_id, [probe], trigger="schedule")
        finally:
            stop.set()
            await cancel_all([renewing])  # waits it out, also when cancelled again meanwhile

    async def _renew(self, job: Job, hold: float, stop: asyncio.Event) -> None:
        """Renew every third of `hold`; after a failed renewal, retry every RENEW_RETRY_S (at most)
        until the lease would lapse: a store back within two thirds of the hold keeps it."""
        expires, wait, failing, told = self.clock() + hold, hold / 3, False, False
        while True:
            await self.sleep(wait)
            if stop.is_set():
                return
            asked = self.clock()
            try:
                held = await self.lease.lease_acquire(lease_key(job), self.owner, hold)
            except Exception as exc:  # StoreUnavailable, or a store's bug: never the end of the run
                lapsed = asked >= expires
                if not failing or (lapsed and not told):
                    log.warning("probes: renewing the lease of %s on %s failed (%s); %s", *job, exc,
                                "it has lapsed: another replica may start the same run" if lapsed else "retrying")  # fmt: skip
                failing, told, wait = True, told or lapsed, min(hold / 3, RENEW_RETRY_S)
                continue
            if stop.is_set():
                return
            if not held:
                log.warning("probes: the lease of %s on %s is held by another replica; the run goes on", *job)
                return
            failing, told, expires, wait = False, False, asked + hold, hold / 3

    async def tick(self) -> int:
        """Run every job that is due; returns how many ran here."""
        ran = 0
        for job in self.due(self.clock()):
            probe, endpoint_id = job
            hold = self.settings.lease_for(self.interval(*job))
            if await self._take(job, hold):
                self.beat.ok()  # the pause before the job is not part of it: its age is the job's alone
                try:
                    await self._run(job, hold)
                    ran += 1
                except Exception:
                    self.failures += 1
                    log.exception("probes: the scheduled %s run on %s failed", probe, endpoint_id)
            else:
                self.skipped += 1
            self._reschedule(job, self.clock())
            self.beat.ok()
        self.runs += ran
        return ran

    def seconds_to_next(self) -> float:
        soonest = min(self.next_run.values(), default=self.clock() + MAX_SLEEP)
        return min(MAX_SLEEP, max(0.0, soonest - self.clock()))

    async def run_forever(self) -> None:
        # The loop outlives anything a round throws (kernel.tasks.run_forever).
        await run_forever(self.tick, self._pause, self.beat, sleep=self.sleep)

    async def _pause(self) -> None:
        await self.sleep(max(0.05, self.seconds_to_next()))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run_forever(), name="probe-scheduler")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
