"""cancel_all: a probe's stop leaves none of its requests running, whatever a request does with a cancel."""

from __future__ import annotations

import asyncio

import pytest

from probes.tasks import cancel_all


async def test_a_task_that_drops_a_cancel_is_cancelled_again() -> None:
    # A library may swallow one cancel (Python 3.11's wait_for does when what it waits for completes
    # at that moment): the task runs on, sending requests, unless the cancel is repeated.
    sent = 0

    async def sends() -> None:
        nonlocal sent
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # dropped
        while True:
            sent += 1
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(sends())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all([task]), timeout=5)
    assert task.cancelled()
    after = sent
    await asyncio.sleep(0.05)
    assert sent == after


async def test_a_cancel_of_the_wait_is_deferred_until_every_task_has_finished() -> None:
    unwound = []

    async def unwinds_slowly(i: int) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.05)  # closing its connection
            unwound.append(i)

    tasks = [asyncio.ensure_future(unwinds_slowly(i)) for i in range(3)]
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(cancel_all(tasks))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert sorted(unwound) == [0, 1, 2] and all(t.done() for t in tasks)
