"""Background tasks that the lifespan starts and stops, and the one way they loop.

Every background loop (state sync, key refresh, retention, the record writer, the probe
scheduler) runs its rounds through `run_forever`, which never lets an exception end the loop:

- an *outage* (an exception type the loop names: the store or database is away) is the loop's
  normal business: the round counts as done (the loop is alive) and a warning is logged at most
  once a minute;
- anything else is a bug or bad data: it is logged with its traceback (at most once a minute),
  counted, and the next round runs after a pause; the round does not count as a success.

Each loop has a `Heartbeat` in the app's `LoopHealth`: the last success (exported as a Prometheus
gauge) and a limit; `/readyz` turns unready while a loop has not succeeded for longer than its limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kernel.clock import Clock

LOG_EVERY = 60.0  # seconds between two log lines about the same loop's trouble
ERROR_PAUSE = 1.0  # at least this long between two rounds after an unexpected failure


# How long to wait for a cancelled task before cancelling it again.
RECANCEL_S = 0.1


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (if any) and wait until it has finished unwinding. The cancellation is
    repeated while the task runs on: a library may drop one (on Python 3.11, `asyncio.wait_for`
    does when what it waits for completes at that moment, and redis-py awaits one per write)."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=RECANCEL_S)
    if not task.cancelled():
        task.result()  # its own failure, as `await task` would raise it


class Heartbeat:
    """One loop's health: when it last completed a round, and what went wrong since."""

    def __init__(
        self,
        name: str,
        limit_s: float,
        *,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.limit_s = limit_s
        self._clock = clock
        self._wall = wall
        self._log = log or logging.getLogger("gateway.background")
        self._since = clock()  # a loop that never succeeds goes stale `limit_s` after it was made
        self.last_success: float | None = None  # wall clock, for the gauge
        self.failures = 0
        self.outages = 0
        self.last_error: str | None = None
        self._last_log = float("-inf")
        self._grace = 0.0

    def ok(self) -> None:
        self._since = self._clock()
        self.last_success = self._wall()
        self._grace = 0.0

    def expect(self, seconds: float) -> None:
        """The next success may legitimately take this much longer (a long replay, a retention pass)."""
        self._grace = max(0.0, seconds)

    def outage(self, exc: BaseException) -> None:
        """The loop's dependency is away: expected, the loop itself is fine."""
        self.outages += 1
        self.ok()
        if self._due():
            self._log.warning("%s: %s", self.name, _one_line(exc))

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = _one_line(exc)
        if self._due():
            self._log.error("%s: unexpected failure, the loop goes on", self.name, exc_info=exc)

    def age(self) -> float:
        """Seconds since the last success (or since the loop was set up)."""
        return self._clock() - self._since

    def stale(self) -> bool:
        return self.age() > self.limit_s + self._grace

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"age_s": round(self.age(), 3), "limit_s": self.limit_s, "failures": self.failures}
        if self.last_error:
            out["last_error"] = self.last_error
        return out

    def _due(self) -> bool:
        now = self._clock()
        if now - self._last_log < LOG_EVERY:
            return False
        self._last_log = now
        return True


class LoopHealth:
    """The app's background loops, by name: what `/readyz` and `/metrics` read."""

    def __init__(self, *, clock: Clock = time.monotonic, wall: Clock = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self.loops: dict[str, Heartbeat] = {}

    def register(self, name: str, limit_s: float, log: logging.Logger | None = None) -> Heartbeat:
        beat = self.loops[name] = Heartbeat(name, limit_s, clock=self._clock, wall=self._wall, log=log)
        return beat

    def stale(self) -> dict[str, dict[str, Any]]:
        return {name: beat.status() for name, beat in self.loops.items() if beat.stale()}


async def run_forever(
    step: Callable[[], Awaitable[object]],
    pause: Callable[[], Awaitable[object]],
    beat: Heartbeat,
    *,
    outages: tuple[type[BaseException], ...] = (),
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """`await step()`, then `await pause()`, until cancelled; see the module docstring."""
    while True:
        failed = False
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except outages as exc:
            beat.outage(exc)
        except Exception as exc:
            failed = True
            beat.failed(exc)
        else:
            beat.ok()
        try:
            if failed:
                await sleep(ERROR_PAUSE)  # a round that fails at once must not spin
            await pause()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            beat.failed(exc)
            await sleep(ERROR_PAUSE)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class Drain:
    """Set when the process is told to stop (SIGTERM): from then on /readyz answers 503 and every
    response closes its connection, so a balancer stops sending here and keeps no pooled
    connection that the replica would cut when it stops accepting (`server.drain_delay_s` later)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.since: float | None = None

    def begin(self) -> None:
        if self.since is None:
            self.since = self._clock()

    @property
    def active(self) -> bool:
        return self.since is not None


class Deadline:
    """One time budget for the whole shutdown, shared by its steps (`server.shutdown_timeout_s`).
    It starts when the server begins to shut down (or at the first `start()`), so the time spent
    draining in-flight requests comes out of the same budget as closing the background work."""

    def __init__(self, seconds: float, *, clock: Clock = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end: float | None = None

    def start(self) -> None:
        if self._end is None:
            self._end = self._clock() + self.seconds

    def remaining(self) -> float:
        self.start()
        assert self._end is not None
        return max(0.0, self._end - self._clock())

    async def run(self, awaitable: Awaitable[object], what: str, *, reserve: float = 0.0) -> bool:
        """Await `awaitable` for what is left of the budget (less `reserve`, kept for later steps);
        past it, cancel it, log and go on. False when it was cut short (or failed)."""
        try:
            await asyncio.wait_for(awaitable, max(0.0, self.remaining() - reserve))
        except TimeoutError:
            logging.getLogger("gateway").warning("shutdown: %s did not finish within the shutdown budget; going on", what)
            return False
        except Exception:
            logging.getLogger("gateway").exception("shutdown: %s failed", what)
            return False
        return True
