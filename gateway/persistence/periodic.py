"""A background task that calls an async function every `interval` seconds; a failure is logged
(at most once a minute per task) and the next round still runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.background import cancel_and_wait

log = logging.getLogger("gateway.persistence")


class Periodic:
    def __init__(
        self, name: str, interval: float, fn: Callable[[], Awaitable[object]], *, log_every: float = 60.0
    ) -> None:
        self.name = name
        self._interval = interval
        self._fn = fn
        self._log_every = log_every
        self._last_log = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self.failures = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"gateway-{self.name}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._fn()
            except Exception as exc:
                self.failures += 1
                now = time.monotonic()
                if now - self._last_log >= self._log_every:
                    self._last_log = now
                    log.warning("%s failed: %s: %s", self.name, type(exc).__name__, str(exc).strip().split("\n")[0])

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
