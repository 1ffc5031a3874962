"""The shared loop runner: no exception ends a loop; outages keep it alive, bugs are logged with
their traceback, counted and make it stale once its limit passes; cancellation still stops it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kernel.tasks import Heartbeat, LoopHealth, run_forever
from tests.fakes.clock import FakeClock


class Down(Exception):
    pass


async def test_a_loop_outlives_bugs_and_outages_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    loops = LoopHealth(clock=clock, wall=lambda: 1700000000.0 + clock())
    beat = loops.register("demo", limit_s=10)
    script: list[Any] = [TypeError("bug"), Down("db away"), None, OverflowError("bad value"), None]
    rounds = 0
    done = asyncio.Event()

    async def step() -> None:
        nonlocal rounds
        rounds += 1
        clock.advance(1)
        outcome = script.pop(0) if script else None
        if not script:
            done.set()
        if outcome is not None:
            raise outcome

    async def pause() -> None:
        await asyncio.sleep(0)

    async def no_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    with caplog.at_level(logging.WARNING, logger="gateway.background"):
        task = asyncio.create_task(run_forever(step, pause, beat, outages=(Down,), sleep=no_sleep))
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.sleep(0)
        assert not task.done()  # neither the TypeError nor the OverflowError ended it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rounds >= 5 and beat.failures == 2 and beat.outages == 1
    assert beat.last_success is not None and beat.last_success >= 1700000005.0
    assert "Traceback" in caplog.text and "TypeError: bug" in caplog.text  # logged with its traceback
    assert not loops.stale()


def test_a_loop_that_never_succeeds_goes_stale_after_its_limit() -> None:
    clock = FakeClock()
    loops = LoopHealth(clock=clock)
    beat = loops.register("sync", limit_s=30)
    clock.advance(29)
    assert loops.stale() == {}
    clock.advance(2)
    assert loops.stale()["sync"]["limit_s"] == 30
    beat.expect(100)  # a long replay: allowed more time, once
    assert loops.stale() == {}
    beat.ok()
    clock.advance(31)
    assert "sync" in loops.stale()


def test_failures_are_logged_at_most_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    beat = Heartbeat("noisy", 10, clock=clock)
    with caplog.at_level(logging.ERROR, logger="gateway.background"):
        for _ in range(100):
            beat.failed(RuntimeError("again"))
        clock.advance(61)
        beat.failed(RuntimeError("again"))
    assert beat.failures == 101 and caplog.text.count("unexpected failure") == 2
