"""Run a probe's concurrent parts so that one failing, or the probe being cancelled, stops them all.

`asyncio.gather` leaves the other awaitables running when one raises: a probe whose reference
side failed kept sending the endpoint side's requests for minutes. `gather_or_cancel` cancels the
rest and waits for them to finish before it re-raises the first exception, unchanged (callers
still catch `BudgetExhausted` or `ProbeUnavailable`, which a TaskGroup would wrap in a group).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from kernel.tasks import RECANCEL_S

log = logging.getLogger("gateway.probes")

T = TypeVar("T")


class OutOfTime(Exception):
    """`within`'s task reached its end and was stopped; `stray` is the task when it ignored every
    cancel for the grace period and was left running (the caller keeps a reference to it)."""

    def __init__(self, stray: asyncio.Task[Any] | None = None) -> None:
        super().__init__("out of time")
        self.stray = stray


async def within(aw: Awaitable[T], ends: float | None, *, grace: float) -> T:
    """`aw`'s result if it finishes before `ends` (the event loop's clock; None: no end), its own
    exception as it raised it (a TimeoutError of its own included), else OutOfTime once it has
    stopped: cancelled, and again every RECANCEL_S while it runs on (a dropped cancel), for up to
    `grace` seconds; a result it returns after its end is not used. A cancel of this call stops
    it the same way (unbounded, as `cancel_all`) before it is raised."""
    now = asyncio.get_running_loop().time
    task = asyncio.ensure_future(aw)
    try:
        while not task.done():
            left = None if ends is None else ends - now()
            if left is not None and left <= 0:
                break
            await asyncio.wait([task], timeout=left)
    except asyncio.CancelledError:
        await cancel_all([task])
        raise
    if task.done():
        return task.result()
    if running := await cancel_all([task], limit=grace):
        running[0].add_done_callback(_retrieve)
        raise OutOfTime(task)
    raise OutOfTime()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A stopped task's own failure: logged, not left to the loop's 'never retrieved'."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("probes: a task failed while it was stopped", exc_info=exc)


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        await cancel_all(tasks)
        raise


async def cancel_all(tasks: Sequence[asyncio.Future[Any]], *, limit: float | None = None) -> list[asyncio.Future[Any]]:
    """Cancel these tasks and wait until each has finished. The cancel is repeated every RECANCEL_S
    while one runs on (a library may drop one: `kernel.tasks.cancel_and_wait`), also while this
    wait is itself cancelled again and again (as `cancel_and_wait` does to a stopping probe), and a
    cancel of this wait is raised only once they have all finished, so none is left sending behind
    the caller. With a `limit` (seconds) and no cancel of this wait, it stops waiting then and
    returns the tasks still running (the caller's to keep). Their own failures are logged here, not
    raised or left to the loop."""
    loop = asyncio.get_running_loop()
    give_up = None if limit is None else loop.time() + limit
    interrupted = False
    cancelled_at: float | None = None
    while pending := [t for t in tasks if not t.done()]:
        if cancelled_at is None or loop.time() - cancelled_at >= RECANCEL_S:
            for task in pending:  # the first cancel, or one repeated: its cancel was dropped
                task.cancel()
            cancelled_at = loop.time()
        if give_up is not None and not interrupted and loop.time() >= give_up:
            break  # cancelled at least once
        wait = RECANCEL_S if give_up is None or interrupted else min(RECANCEL_S, max(0.0, give_up - loop.time()))
        try:
            await asyncio.wait(pending, timeout=wait)
        except asyncio.CancelledError:
            interrupted = True
    for task in tasks:
        if task.done():
            _retrieve(task)
    if interrupted:
        raise asyncio.CancelledError
    return [t for t in tasks if not t.done()]
