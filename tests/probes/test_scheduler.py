"""The scheduler with a fake clock and a fake runner: jitter, demoted slowdown, errors survived,
replicas deduplicated by the lease (whose contract, on memory and on the real Redis, is in
tests/gateway/state_store/test_contract.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from gateway.health_states import HealthStates
from gateway.state_store import StoreUnavailable
from gateway.state_store.memory import MemoryStore
from probes.registry import ProbeRegistry
from probes.scheduler import Lease, ProbeScheduler
from probes.settings import AuditSettings, ProbeSettings
from tests.fakes.clock import FakeClock


class FakeRunner:
    def __init__(self, clock: FakeClock, *, fail_on: str | None = None) -> None:
        self.registry = ProbeRegistry({"logprob_drift": object, "fidelity": object})  # type: ignore[dict-item]
        self.calls: list[tuple[float, str, str]] = []
        self.clock = clock
        self.fail_on = fail_on

    async def run(self, endpoint_id: str, probes: list[str], *, trigger: str = "schedule", **kw: Any) -> None:
        assert trigger == "schedule" and len(probes) == 1
        self.calls.append((self.clock(), probes[0], endpoint_id))
        if endpoint_id == self.fail_on:
            raise ConnectionError("endpoint down")


SETTINGS = ProbeSettings(intervals={"logprob_drift": 3600.0, "fidelity": 86_400.0, "agent": 10.0}, jitter=0.1,
                         demoted_slowdown=4.0, lease_seconds=60.0, audit=AuditSettings(seconds=50.0))


def scheduler(runner: FakeRunner, clock: FakeClock, lease: Lease, *, owner: str = "r1", health: HealthStates | None = None,
              seed: int = 0) -> ProbeScheduler:
    return ProbeScheduler(runner, SETTINGS, health or HealthStates(), lease, endpoints=["a", "b"], owner=owner,  # type: ignore[arg-type]
                          clock=clock, sleep=clock.sleep, rng=random.Random(seed))


async def run_for(sched: ProbeScheduler, clock: FakeClock, seconds: float, step: float = 60.0) -> None:
    end = clock() + seconds
    while clock() < end:
        await sched.tick()
        clock.advance(step)


async def test_jobs_are_per_probe_and_endpoint_and_only_for_registered_probes() -> None:
    clock = FakeClock()
    sched = scheduler(FakeRunner(clock), clock, MemoryStore(clock))
    assert set(sched.next_run) == {("logprob_drift", "a"), ("logprob_drift", "b"), ("fidelity", "a"), ("fidelity", "b")}
    assert all(clock() <= at <= clock() + SETTINGS.intervals[p] for (p, _), at in sched.next_run.items())


async def test_runs_follow_the_interval_with_jitter() -> None:
    clock = FakeClock()
    runner = FakeRunner(clock)
    sched = scheduler(runner, clock, MemoryStore(clock))
    await run_for(sched, clock, 2 * 86_400)
    drift_a = [t for t, p, ep in runner.calls if (p, ep) == ("logprob_drift", "a")]
    gaps = [b - a for a, b in zip(drift_a, drift_a[1:])]
    assert 45 <= len(drift_a) <= 55
    assert all(3600 * 0.9 - 60 <= g <= 3600 * 1.1 + 60 for g in gaps)
    assert max(gaps) - min(gaps) > 120  # jittered, not a fixed beat
    assert 1 <= sum(1 for _, p, ep in runner.calls if (p, ep) == ("fidelity", "b")) <= 3


async def test_demoted_endpoints_are_probed_less_often() -> None:
    clock = FakeClock()
    runner = FakeRunner(clock)
    health = HealthStates()
    await health.transition("b", "demoted", source="probe", reason="drift", at=0.0)
    sched = scheduler(runner, clock, MemoryStore(clock), health=health)
    await run_for(sched, clock, 2 * 86_400)
    count = {ep: sum(1 for _, p, e in runner.calls if (p, e) == ("logprob_drift", ep)) for ep in "ab"}
    assert 10 <= count["b"] <= 15 and count["a"] >= 3.5 * count["b"]


async def test_errors_do_not_stop_the_scheduler() -> None:
    clock = FakeClock()
    runner = FakeRunner(clock, fail_on="a")
    sched = scheduler(runner, clock, MemoryStore(clock))
    await run_for(sched, clock, 86_400)
    assert sched.failures >= 20 and sum(1 for _, _, ep in runner.calls if ep == "b") >= 20


async def test_the_loop_runs_and_cancels_cleanly() -> None:
    clock = FakeClock()
    runner = FakeRunner(clock)
    sched = scheduler(runner, clock, MemoryStore(clock))
    sched.sleep = lambda s: asyncio.sleep(0, clock.advance(s))  # type: ignore[assignment,func-returns-value]
    sched.start()
    for _ in range(200):
        await asyncio.sleep(0)
    await sched.aclose()
    assert runner.calls and sched._task is None


async def test_two_replicas_run_each_job_once() -> None:
    clock = FakeClock()
    store = MemoryStore(clock)  # the shared store both replicas lease through
    r1, r2 = FakeRunner(clock), FakeRunner(clock)
    s1, s2 = scheduler(r1, clock, store, owner="r1", seed=1), scheduler(r2, clock, store, owner="r2", seed=2)
    end = clock() + 86_400
    while clock() < end:
        await s1.tick()
        await s2.tick()
        clock.advance(60)
    runs = sorted(r1.calls + r2.calls)
    drift_a = [t for t, p, ep in runs if (p, ep) == ("logprob_drift", "a")]
    # One run per interval between both replicas, not two.
    assert 21 <= len(drift_a) <= 29, len(drift_a)
    assert all(b - a >= 3600 * 0.9 * 0.95 - 60 for a, b in zip(drift_a, drift_a[1:]))
    assert s1.skipped + s2.skipped >= 40


class Timeline:
    """A clock moved by hand whose sleeps wait until it has moved past them (a run and the lease's
    renewal interleave as on a real loop)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waiting: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((self.now + seconds, woken))
        await woken

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for at, woken in [w for w in self.waiting if w[0] <= self.now]:
            self.waiting.remove((at, woken))
            if not woken.done():
                woken.set_result(None)
        for _ in range(10):
            await asyncio.sleep(0)


class HeldRunner(FakeRunner):
    """Each run lasts until the test lets it end."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.release = asyncio.Event()

    async def run(self, endpoint_id: str, probes: list[str], *, trigger: str = "schedule", **kw: Any) -> None:
        await super().run(endpoint_id, probes, trigger=trigger)
        await self.release.wait()


SHORT = ProbeSettings(intervals={"logprob_drift": 1200.0}, jitter=0.1, lease_seconds=900.0,
                      audit=AuditSettings(seconds=1800.0))


async def start_held_run(timeline: Timeline, store: MemoryStore) -> tuple[HeldRunner, ProbeScheduler, asyncio.Task[int]]:
    """r1's scheduler with its job due, and its tick running the job until the runner is released."""
    runner = HeldRunner(timeline)
    sched = ProbeScheduler(runner, SHORT, HealthStates(), store, endpoints=["a"], owner="r1",  # type: ignore[arg-type]
                           clock=timeline, sleep=timeline.sleep, rng=random.Random(0))
    await timeline.advance(1200)
    return runner, sched, asyncio.create_task(sched.tick())


async def test_a_restarted_replica_takes_over_a_job_within_its_lease_not_the_audit_bound() -> None:
    """A replica restarts under a new name: the lease its old self took for a 20-minute job keeps
    the job from running until it expires. It was held as long as an audit may take (1,920 s with
    the defaults) where 0.855 of the interval (1,026 s) kept the replicas apart before."""
    clock = FakeClock()
    store = MemoryStore(clock)
    old = ProbeScheduler(FakeRunner(clock), SHORT, HealthStates(), store, endpoints=["a"], owner="host:1",  # type: ignore[arg-type]
                         clock=clock, sleep=clock.sleep, rng=random.Random(0))
    clock.advance(1200)
    assert await old.tick() == 1
    taken = clock()
    runner = FakeRunner(clock)
    new = ProbeScheduler(runner, SHORT, HealthStates(), store, endpoints=["a"], owner="host:2",  # type: ignore[arg-type]
                         clock=clock, sleep=clock.sleep, rng=random.Random(1))
    new.next_run = {job: clock() for job in new.next_run}  # due at once, and retried every 60 s
    while not runner.calls:
        await new.tick()
        for job in new.next_run:
            new.next_run[job] = min(new.next_run[job], clock() + 60)
        clock.advance(60)
    assert runner.calls[0][0] - taken <= 1200 * 0.9 * 0.95 + 60


async def test_the_lease_is_renewed_while_a_run_outlasts_it() -> None:
    """No other replica starts the same job while it runs, however long it runs (up to the audit's
    bound, 1,800 s by default, twice this job's lease)."""
    timeline = Timeline()
    store = MemoryStore(timeline)
    runner, sched, ticking = await start_held_run(timeline, store)
    await timeline.advance(0)
    assert len(runner.calls) == 1
    hold = SHORT.lease_for(1200)
    for _ in range(int(2.5 * hold / 30)):  # the run lasts 2.5 leases
        await timeline.advance(30)
        assert not await store.lease_acquire("probe:logprob_drift:a", "r2", hold)
    runner.release.set()
    assert await asyncio.wait_for(ticking, 5) == 1
    # The renewal stopped with the run: the lease lapses within one hold of the run's end.
    await timeline.advance(hold + 1)
    assert await store.lease_acquire("probe:logprob_drift:a", "r2", hold)
    assert all(woken.done() for _, woken in timeline.waiting)  # nothing of the run left sleeping



async def test_a_store_that_fails_to_renew_does_not_end_the_run() -> None:
    timeline = Timeline()
    store = MemoryStore(timeline)
    calls = 0
    take = store.lease_acquire

    async def flaky(key: str, owner: str, ttl_s: float) -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreUnavailable("redis: connection refused")
        if calls == 3:
            raise RuntimeError("a store's bug")
        return await take(key, owner, ttl_s)

    store.lease_acquire = flaky  # type: ignore[method-assign]
    runner, sched, ticking = await start_held_run(timeline, store)
    hold = SHORT.lease_for(1200)
    for _ in range(int(3 * hold / 10)):  # three holds, in the retry's steps
        await timeline.advance(10)
        assert not await take("probe:logprob_drift:a", "r2", hold)
    assert calls > 4 and not ticking.done()  # renewed again after both failures
    runner.release.set()
    assert await asyncio.wait_for(ticking, 5) == 1 and sched.failures == 0


async def test_a_store_outage_shorter_than_the_lease_does_not_let_another_replica_in() -> None:
    """Renewals a third of the lease apart, with a failed one tried again only a third later, let
    the lease lapse in an outage of 700 s of a 1,026-s lease (each failing call took 5 s): another
    replica started the same job while it ran."""
    timeline = Timeline()
    store = MemoryStore(timeline)
    take = store.lease_acquire
    start = 1000.0 + 1200
    down = (start + 300, start + 1000)

    async def outage(key: str, owner: str, ttl_s: float) -> bool:
        if down[0] <= timeline() < down[1]:
            await timeline.sleep(5)  # a connect timeout
            raise StoreUnavailable("redis: timed out")
        return await take(key, owner, ttl_s)

    store.lease_acquire = outage  # type: ignore[method-assign]
    runner, sched, ticking = await start_held_run(timeline, store)
    hold = SHORT.lease_for(1200)
    while timeline() < start + 2 * hold:
        await timeline.advance(5)
        if timeline() >= down[1]:  # the store is back: the other replica comes due
            assert not await take("probe:logprob_drift:a", "r2", hold), timeline() - start
    runner.release.set()
    assert await asyncio.wait_for(ticking, 5) == 1


async def test_closing_the_scheduler_mid_run_ends_the_renewal_even_where_the_store_drops_a_cancel() -> None:
    """aclose's re-cancel landed while the run's cleanup waited for the renewal, whose store call
    dropped its one cancellation (as redis-py may on 3.11): the renewal outlived the scheduler and
    held the lease for good."""
    store = MemoryStore(lambda: asyncio.get_running_loop().time())
    take = store.lease_acquire
    in_call, dropped = asyncio.Event(), asyncio.Event()
    armed = False

    async def slow(key: str, owner: str, ttl_s: float) -> bool:
        if armed and not dropped.is_set():
            in_call.set()
            try:
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                dropped.set()  # and carries on
        return await take(key, owner, ttl_s)

    store.lease_acquire = slow  # type: ignore[method-assign]

    class Forever(FakeRunner):
        async def run(self, endpoint_id: str, probes: list[str], **kw: Any) -> None:
            await asyncio.sleep(3600)

    settings = ProbeSettings(intervals={"logprob_drift": 0.3}, lease_seconds=0.3)  # renewed every 0.1 s
    loop_clock = asyncio.get_running_loop().time
    sched = ProbeScheduler(Forever(loop_clock), settings, HealthStates(), store, endpoints=["a"], owner="r1",  # type: ignore[arg-type]
                           clock=loop_clock, rng=random.Random(0))
    sched.next_run = {job: loop_clock() for job in sched.next_run}
    sched.start()
    await asyncio.sleep(0.05)
    armed = True
    await asyncio.wait_for(in_call.wait(), 30)
    await sched.aclose()
    renewals = [t for t in asyncio.all_tasks() if t.get_name().startswith("lease-")]
    # A guard only: the renewal ends once its store call returns (0.5 s).
    await asyncio.wait_for(asyncio.gather(*renewals, return_exceptions=True), 30)
    await asyncio.sleep(0.35)  # past its last hold
    assert await take("probe:logprob_drift:a", "r2", 0.3)


# -- where it runs: the gateway's lifespan and `gwctl worker` ---------------------------------


def test_the_gateway_lifespan_starts_and_stops_the_scheduler(tmp_path: Any) -> None:
    from starlette.testclient import TestClient

    from gateway.app import create_app
    from providers.http_mock import MockHTTPClient
    from tests.gateway.persistence.app_helpers import answer, settings

    app = create_app(settings(tmp_path, None, probes={"enabled": True}), client_factory=lambda: MockHTTPClient(answer))
    with TestClient(app) as client:
        assert client.app_state["gw"].probes is not None
        tasks = client.portal.call(lambda: [t.get_name() for t in asyncio.all_tasks()])  # type: ignore[union-attr]
        assert "probe-scheduler" in tasks
    # Leaving the client ran the lifespan's shutdown: the task was cancelled and awaited.


async def test_the_worker_runs_scheduled_probes_until_stopped(tmp_path: Any) -> None:
    from gateway.worker import run_worker
    from providers.http_mock import MockHTTPClient
    from tests.gateway.persistence.app_helpers import answer, settings

    upstream = MockHTTPClient(answer)
    cfg = settings(tmp_path, None, probes={"intervals": {"fidelity": 0.2}, "fidelity": {"samples": 10}, "seed": 1})
    stop = asyncio.Event()

    async def stop_when_both_probed() -> None:
        for _ in range(400):
            if {r.url.split("/v1")[0] for r in upstream.requests} == {"http://p.test", "http://q.test"}:
                break
            await asyncio.sleep(0.05)
        stop.set()

    watcher = asyncio.get_running_loop().create_task(stop_when_both_probed())
    counts = await run_worker(cfg, stop=stop, client_factory=lambda: upstream)
    await watcher
    # Both endpoints' fidelity probes ran (the mock answers carry no logprobs: error results, survived).
    assert counts["runs"] >= 2 and counts["failures"] == 0
    assert {r.url.split("/v1")[0] for r in upstream.requests} == {"http://p.test", "http://q.test"}
    assert upstream.closed
