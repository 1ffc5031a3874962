"""The sync loop (`gateway.routing.sync`) stops when cancelled, even when a wake-up arrives in the
same loop iteration as the cancellation (Python 3.11's `asyncio.wait_for` then returned the wake-up's result and dropped
the cancellation: the loop ran on and a gateway's shutdown hung, seen after a burst of requests)."""

from __future__ import annotations

import asyncio

from gateway.state_store.memory import MemoryStore
from tests.fakes.clock import FakeClock
from tests.gateway.routing.test_shared import replica


async def test_a_wake_up_at_cancellation_does_not_keep_the_sync_loop_running() -> None:
    clock = FakeClock()
    shared = replica(MemoryStore(clock), clock, "r1")
    shared.start()
    task = shared.sync._task
    assert task is not None
    for _ in range(50):  # the first sync round, then parked in the pause, waiting for a wake-up
        await asyncio.sleep(0)
    assert shared.sync._wake is not None and not task.done()
    shared.sync._wake.set()  # e.g. an endpoint went idle as the last request finished
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2.0)
    assert task in done and task.cancelled()


async def test_cancel_and_wait_repeats_a_cancellation_the_task_dropped() -> None:
    """redis-py awaits `asyncio.wait_for(writer.drain(), ...)`: on Python 3.11 a cancellation that
    arrives as the drain completes is dropped, and a loop that only gets one cancel runs on."""
    from kernel.tasks import cancel_and_wait

    dropped = 0

    async def loop_that_drops_one_cancel() -> None:
        nonlocal dropped
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if dropped == 0:  # what the library does once, then the loop goes on
                    dropped += 1
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    continue
                raise

    task = asyncio.create_task(loop_that_drops_one_cancel())
    await asyncio.sleep(0.02)
    closing = asyncio.create_task(cancel_and_wait(task))
    done, _ = await asyncio.wait([closing], timeout=2.0)  # not wait_for: its cancel would end the task
    assert closing in done and dropped == 1 and task.cancelled()
