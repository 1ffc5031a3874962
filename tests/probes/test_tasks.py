"""cancel_all: a probe's stop leaves none of its requests running, whatever a request does with a cancel."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kernel.tasks import cancel_and_wait
from probes.tasks import cancel_all, gather_or_cancel


class DropsACancel:
    """A request that swallows its first cancel and then keeps sending."""

    def __init__(self) -> None:
        self.sent = 0

    async def run(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # dropped
        while True:
            self.sent += 1
            await asyncio.sleep(0.01)

    async def sends_no_more(self) -> bool:
        after = self.sent
        await asyncio.sleep(0.05)
        return self.sent == after


async def test_a_task_that_drops_a_cancel_is_cancelled_again() -> None:
    # A library may swallow one cancel (Python 3.11's wait_for does when what it waits for completes
    # at that moment): the task runs on, sending requests, unless the cancel is repeated.
    sender = DropsACancel()
    task = asyncio.ensure_future(sender.run())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all([task]), timeout=5)
    assert task.cancelled()
    assert await sender.sends_no_more()


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


async def test_a_dropped_cancel_is_repeated_while_the_caller_is_cancelled_again_and_again() -> None:
    # The scheduler stops a probe with kernel.tasks.cancel_and_wait, which cancels it every RECANCEL_S:
    # each of those cancels reached cancel_all's wait before its own timer, so the task that dropped
    # its cancel was never cancelled again and the stop never finished.
    sender = DropsACancel()

    async def fails() -> None:
        await asyncio.sleep(0.02)
        raise RuntimeError("the reference side failed")

    probe = asyncio.ensure_future(gather_or_cancel(sender.run(), fails()))
    await asyncio.sleep(0.05)  # the reference side has raised: cancel_all is waiting on the endpoint side
    await asyncio.wait_for(cancel_and_wait(probe), timeout=5)
    assert await sender.sends_no_more()


async def test_a_failure_while_unwinding_is_logged_not_left_to_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    unretrieved: list[str] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx["message"]))

    async def fails_to_close() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            raise OSError("closing the connection failed")

    tasks = [asyncio.ensure_future(fails_to_close())]
    await asyncio.sleep(0)
    await cancel_all(tasks)
    del tasks
    gc.collect()
    await asyncio.sleep(0)
    assert unretrieved == []
    assert any(r.exc_info and isinstance(r.exc_info[1], OSError) for r in caplog.records)
