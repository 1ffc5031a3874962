"""A background task that calls an async function every `interval` seconds, through the shared
loop runner (`kernel.tasks.run_forever`): a database outage is logged (at most once a
minute), a bug is logged with its traceback, and the next round still runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kernel.tasks import Heartbeat, cancel_and_wait, run_forever

log = logging.getLogger("gateway.persistence")


class Periodic:
    def __init__(
        self,
        name: str,
        interval: float,
        fn: Callable[[], Awaitable[object]],
        *,
        beat: Heartbeat | None = None,
        outages: tuple[type[BaseException], ...] = (Exception,),
    ) -> None:
        self.name = name
        self._interval = interval
        self._fn = fn
        self.beat = beat or Heartbeat(name, 3 * interval + 60, log=log)
        self._outages = outages
        self._task: asyncio.Task[None] | None = None

    @property
    def failures(self) -> int:
        return self.beat.failures + self.beat.outages

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"gateway-{self.name}")

    async def _run(self) -> None:
        await asyncio.sleep(self._interval)
        await run_forever(self._fn, self._pause, self.beat, outages=self._outages)

    async def _pause(self) -> None:
        await asyncio.sleep(self._interval)

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
