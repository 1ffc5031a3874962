"""Two gateway replicas (real `gwctl serve` processes) behind a real balancer, a fake upstream
behind them, open-loop load through the openai SDK the whole time; every test runs behind nginx
(deploy/nginx.conf, passive checks) and behind HAProxy (deploy/haproxy.cfg, /readyz polled):

- a rolling SIGTERM restart of every replica loses no request: each replica turns /readyz unready
  at once, keeps answering through `server.drain_delay_s` (its responses closing their
  connections), stops accepting, finishes what is in flight and exits 0 within its budget;
- SIGKILL of one replica loses only requests in flight on it (its cut streams raise in the SDK,
  none ends as if complete), and the survivor answers everything sent after it.

The load is modest (a shared 2-core machine): 12 requests a second, 40% streams of about a second.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.ops.cluster import BALANCERS, FakeUpstream, Gateway, balancer_binary, free_port, make_balancer
from tests.ops.load import Load, Outcome, causes
from tests.services import require

KEY = "sk-rolling-restart-01"
RATE = 12.0
DRAIN_DELAY = 5.0  # over nginx's upstream keepalive_timeout (4 s) and HAProxy's 2 failed checks a second apart
SHUTDOWN = 10.0
CHUNK_DELAY = 0.1
# The fake upstream echoes the prompt word by word: about ten events a stream, CHUNK_DELAY apart.
PROMPT = "please tell me about rolling restarts behind a balancer"


class Cluster:
    def __init__(self, tmp: Path, balancer: str) -> None:
        self.tmp = tmp
        self.upstream = FakeUpstream("upstream", free_port(), tmp, ["--chunk-delay", str(CHUNK_DELAY)])
        config = {
            "server": {"shutdown_timeout_s": SHUTDOWN, "drain_delay_s": DRAIN_DELAY, "log_level": "warning"},
            "auth": {"keys": [{"name": "ops", "key": KEY}]},
            "providers": [{"name": "fake", "kind": "openai", "base_url": self.upstream.url}],
            "deployments": [{"model": "m", "provider": "fake", "upstream_model": "m@slow:0.2"}],
        }
        path = tmp / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        self.gateways = [Gateway(f"gw{i}", path, free_port(), tmp) for i in range(2)]
        self.balancer = make_balancer(balancer, free_port(), [g.port for g in self.gateways], tmp)
        self.startup_s = 0.0

    def start(self) -> Cluster:
        self.upstream.start().wait_ready()
        for gw in self.gateways:
            gw.start()
        self.startup_s = max(gw.wait_ready(120) for gw in self.gateways)
        self.balancer.start().wait_ready()
        for gw in self.gateways:
            self.balancer.wait_in_rotation(gw.port, 30)
        return self

    def stop(self) -> None:
        for proc in (self.balancer, *self.gateways, self.upstream):
            proc.stop(grace=SHUTDOWN + DRAIN_DELAY + 5)

    def load(self, timeout: float) -> Load:
        return Load(self.balancer.url, KEY, "m", RATE, stream_share=0.4, timeout=timeout, prompt=PROMPT)


@pytest.fixture(scope="module", params=BALANCERS)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    kind = str(request.param)
    # Debian's nginx-light and haproxy: scripts/test.sh installs both; under CI a missing one fails.
    require(balancer_binary(kind) is not None, f"{kind} is not installed (scripts/test.sh installs it)")
    c = Cluster(tmp_path_factory.mktemp(f"rolling-{kind}"), kind)
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(scope="module")
def request_timeout(cluster: Cluster) -> float:
    """From measured speed: a few sequential requests through the balancer, 20 times the slowest
    (and at least the upstream's own time, twice)."""

    async def measure() -> float:
        load = cluster.load(timeout=60)
        client = load.client()
        try:
            outs = [await load.one(client, stream) for stream in (False, True, False, True)]
        finally:
            await client.close()
        assert all(o.ok for o in outs), [o.cause for o in outs]
        return max(o.end - o.start for o in outs)

    return max(20 * asyncio.run(measure()), 2 * (0.2 + 12 * CHUNK_DELAY))


def _readyz(gw: Gateway) -> tuple[int, dict[str, object]]:
    r = httpx.get(gw.url + "/readyz", timeout=2)
    return r.status_code, r.json()


def _check_answers(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        if o.ok:
            assert o.text.startswith("You said: please tell me"), o


def test_a_rolling_sigterm_restart_of_every_replica_loses_no_request(cluster: Cluster, request_timeout: float) -> None:
    restart_timeout = max(60.0, 10 * cluster.startup_s)
    events: dict[str, float] = {}

    async def roll(stop: asyncio.Event) -> None:
        await asyncio.sleep(2.0)  # steady load first
        for gw in cluster.gateways:
            events[f"{gw.name} sigterm"] = time.monotonic()
            gw.signal(signal.SIGTERM)
            # Unready at once, while still accepting (the balancer's health checks see it).
            status, body = await asyncio.to_thread(_readyz, gw)
            assert status == 503 and body["status"] == "draining", body
            rc = await asyncio.to_thread(gw.wait, DRAIN_DELAY + SHUTDOWN + 5)
            events[f"{gw.name} exited"] = time.monotonic()
            assert rc == 0, gw.log_tail()
            gw.start()
            await asyncio.to_thread(gw.wait_ready, restart_timeout)
            events[f"{gw.name} ready"] = time.monotonic()
            # Back in rotation before the next replica drains (HAProxy: its next /readyz check;
            # nginx: at once), and a second more of load through both.
            await asyncio.to_thread(cluster.balancer.wait_in_rotation, gw.port, restart_timeout)
            await asyncio.sleep(1.0)
        await asyncio.sleep(1.0)
        stop.set()

    async def main() -> list[Outcome]:
        stop = asyncio.Event()
        load = cluster.load(request_timeout)
        results = await asyncio.gather(load.run(300, stop), roll(stop))
        return results[0]

    outcomes = asyncio.run(main())
    _check_answers(outcomes)
    failed = [o for o in outcomes if not o.ok]
    assert not failed, (causes(outcomes), failed[:5], events)
    # The restarts happened under load: requests were in flight at each SIGTERM, streams among them.
    for name, t in events.items():
        if name.endswith("sigterm"):
            assert any(o.stream and o.in_flight_at(t) for o in outcomes), name
    assert len(outcomes) >= RATE * 10
    for gw in cluster.gateways:  # each drained in its budget: the delay, then at most the shutdown budget
        took = events[f"{gw.name} exited"] - events[f"{gw.name} sigterm"]
        assert DRAIN_DELAY <= took < DRAIN_DELAY + SHUTDOWN, took


def test_sigkill_of_one_replica_loses_only_its_in_flight_requests(cluster: Cluster, request_timeout: float) -> None:
    victim, survivor = cluster.gateways
    long_prompt = " ".join(["word"] * 30)  # about 3 s of stream at CHUNK_DELAY
    killed_at: list[float] = []

    async def main() -> tuple[list[Outcome], list[Outcome]]:
        stop = asyncio.Event()
        load = cluster.load(request_timeout)
        # Long streams started just before the kill, round-robined over both replicas: some are on
        # the victim when it dies.
        long = Load(cluster.balancer.url, KEY, "m", RATE, timeout=request_timeout)
        client = long.client()

        async def kill() -> list[Outcome]:
            await asyncio.sleep(2.0)
            streams = [asyncio.create_task(long.one(client, True, long_prompt)) for _ in range(6)]
            await asyncio.sleep(1.0)
            killed_at.append(time.monotonic())
            victim.signal(signal.SIGKILL)
            # Its sockets close when it has exited: on a loaded machine that is not instant.
            await asyncio.to_thread(victim.wait, 10.0)
            killed_at.append(time.monotonic())
            await asyncio.sleep(4.0)
            stop.set()
            return list(await asyncio.gather(*streams))

        try:
            results = await asyncio.gather(load.run(300, stop), kill())
        finally:
            await client.close()
        return results[0], results[1]

    try:
        outcomes, long_streams = asyncio.run(main())
    finally:
        victim.kill()
        victim.start()
        victim.wait_ready(max(60.0, 10 * cluster.startup_s))
        cluster.balancer.wait_in_rotation(victim.port, 60)
    t_kill, t_dead = killed_at
    _check_answers(outcomes)
    # Only what was in flight between the signal and the victim's exit failed; everything that
    # started after the exit was answered.
    for o in outcomes + long_streams:
        if not o.ok:
            assert o.start <= t_dead and o.end >= t_kill, (o, t_kill, t_dead)
    after = [o for o in outcomes if o.start > t_dead]
    assert len(after) >= RATE * 3 and all(o.ok for o in after), causes(after)
    # The long streams on the victim were cut: the SDK raised (no finish_reason, no clean end);
    # those on the survivor ended normally.
    cut = [o for o in long_streams if not o.ok]
    whole = [o for o in long_streams if o.ok]
    assert cut and whole, [(o.cause, len(o.text)) for o in long_streams]
    assert all(o.cause in ("cut", "connect", "http 502") for o in cut), [o.cause for o in cut]
    assert all(o.text.count("word") == 30 for o in whole)
    assert all(o.text.count("word") < 30 for o in cut)
    assert survivor.alive
