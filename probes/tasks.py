"""Run a probe's concurrent parts so that one failing, or the probe being cancelled, stops them all.

`asyncio.gather` leaves the other awaitables running when one raises: a probe whose reference
side failed kept sending the endpoint side's requests for minutes. `gather_or_cancel` cancels the
rest and waits for them to finish before it re-raises the first exception, unchanged (callers
still catch `BudgetExhausted` or `ProbeUnavailable`, which a TaskGroup would wrap in a group).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from kernel.tasks import RECANCEL_S


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        await cancel_all(tasks)
        raise


async def cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel these tasks and wait until each has finished. The cancel is repeated while one runs on
    (a library may drop one: `kernel.tasks.cancel_and_wait`), and a cancel of this wait is raised
    only once they have all finished, so none is left sending behind the caller."""
    for task in tasks:
        task.cancel()
    interrupted = False
    while pending := [t for t in tasks if not t.done()]:
        try:
            await asyncio.wait(pending, timeout=RECANCEL_S)
        except asyncio.CancelledError:
            interrupted = True
            continue
        for task in pending:
            if not task.done():  # ran on: its cancel was dropped
                task.cancel()
    if interrupted:
        raise asyncio.CancelledError
