"""cancel_all: a probe's stop leaves none of its requests running, whatever a request does with a cancel."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kernel.tasks import cancel_and_wait
from probes.tasks import OutOfTime, cancel_all, gather_or_cancel, within


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


async def test_within_gives_the_result_of_what_ends_in_time() -> None:
    async def quick() -> int:
        await asyncio.sleep(0.01)
        return 7

    assert await within(quick(), asyncio.get_running_loop().time() + 5, grace=1) == 7
    assert await within(quick(), None, grace=1) == 7


async def test_within_raises_what_the_task_raised_its_own_timeout_included() -> None:
    async def times_out() -> None:
        raise TimeoutError("its own request")

    with pytest.raises(TimeoutError, match="its own request"):
        await within(times_out(), asyncio.get_running_loop().time() + 5, grace=1)


async def test_within_stops_a_task_that_drops_a_cancel_at_its_end() -> None:
    # asyncio.timeout_at cancels once: a task that dropped that cancel ran on with no end.
    sender = DropsACancel()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(OutOfTime) as raised:
        await asyncio.wait_for(within(sender.run(), began + 0.2, grace=1), timeout=5)
    assert loop.time() - began < 0.2 + 0.5 and raised.value.stray is None
    assert await sender.sends_no_more()


async def test_a_result_returned_after_the_end_is_not_used() -> None:
    async def answers_late() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # dropped, then answers as if nothing happened
        return "late"

    with pytest.raises(OutOfTime):
        await within(answers_late(), asyncio.get_running_loop().time() + 0.1, grace=1)


async def test_a_task_that_ignores_every_cancel_is_left_behind_after_the_grace() -> None:
    release = asyncio.Event()

    async def ignores_cancels() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue

    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(OutOfTime) as raised:
        await within(ignores_cancels(), began + 0.1, grace=0.3)
    assert 0.4 <= loop.time() - began < 1.0
    stray = raised.value.stray
    assert stray is not None and not stray.done()  # handed back, so the caller can keep and report it
    release.set()
    await asyncio.wait([stray], timeout=1)
    assert stray.done()


async def test_a_cancel_of_within_stops_its_task_first() -> None:
    sender = DropsACancel()
    outer = asyncio.ensure_future(within(sender.run(), None, grace=1))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert await sender.sends_no_more()


async def test_with_no_grace_the_task_is_still_cancelled_once() -> None:
    cancels: list[int] = []
    release = asyncio.Event()

    async def notes_cancels() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                cancels.append(1)  # noted, and on it goes

    with pytest.raises(OutOfTime) as raised:
        await within(notes_cancels(), asyncio.get_running_loop().time() + 0.05, grace=0)
    await asyncio.sleep(0.02)
    assert cancels == [1] and raised.value.stray is not None
    release.set()
    await asyncio.wait([raised.value.stray], timeout=1)
