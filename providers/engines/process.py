"""One engine process: spawned in its own session, killed with its parent, output sent to a logger.

Orphans are prevented twice over. The child leads its own process group, so `terminate` reaches
anything it forks. On Linux it also asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG), which covers a gateway that is SIGKILLed or crashes before `terminate`.
The kernel sends that signal when the *thread* that forked the child exits, so spawn from the
event loop's long-lived thread (what asyncio does).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import re
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence

# One output line -> (logging level, text to log).
LineParser = Callable[[str], tuple[int, str]]

_PR_SET_PDEATHSIG = 1
# Engines print long lines (model metadata); allow up to 1 MiB before a line is dropped.
_LINE_LIMIT = 1024 * 1024
_TAIL_LINES = 50
_TELLING = re.compile(r"error|exception|failed|not found|denied|killed", re.IGNORECASE)


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    # Load libc before fork: loading a library in the forked child of a threaded process can deadlock.
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl; then nobody will send the signal.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class EngineProcess:
    """A running engine; create with `await EngineProcess.spawn(...)`."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        prefix: str,
        logger: logging.Logger,
        level: int,
        parse: LineParser | None = None,
    ) -> None:
        self._proc = proc
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        assert proc.stdout is not None
        self._pump = asyncio.create_task(self._forward(proc.stdout, prefix, logger, level, parse))

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        prefix: str,
        logger: logging.Logger,
        level: int = logging.INFO,
        parse: LineParser | None = None,
    ) -> EngineProcess:
        """Start `argv`; stdout and stderr go, merged and in order, to `logger` as "<prefix> <line>".

        `parse` turns a line into (level, text), for engines that say how serious each line is;
        without it every line is logged at `level` as it is.
        """
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
            limit=_LINE_LIMIT,
        )
        return cls(proc, prefix, logger, level, parse)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await self._proc.wait()

    async def output_done(self, timeout: float) -> None:
        """Wait up to `timeout` s for the output pipe to drain (after exit, so the last lines are kept)."""
        await asyncio.wait({self._pump}, timeout=timeout)

    def last_telling_line(self) -> str:
        """The last output line that looks like an error, else the last line, else ''."""
        for line in reversed(self._tail):
            if _TELLING.search(line):
                return line
        return self._tail[-1] if self._tail else ""

    async def terminate(self, grace: float) -> None:
        """SIGTERM the process group, SIGKILL it after `grace` seconds; safe to call again."""
        if self._proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), grace)
            except TimeoutError:
                pass
        # Also reaches children that outlived the leader or ignored SIGTERM.
        self._signal_group(signal.SIGKILL)
        await self._proc.wait()
        # A grandchild outside the group could hold the pipe open; do not wait on it forever.
        await self.output_done(timeout=grace)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def _forward(
        self, stream: asyncio.StreamReader, prefix: str, logger: logging.Logger, level: int, parse: LineParser | None
    ) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:
                continue  # a line over _LINE_LIMIT; asyncio has already discarded it
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip()
            line_level = level
            if line and parse is not None:
                line_level, line = parse(line)
            if line:
                self._tail.append(line)
                logger.log(line_level, "%s %s", prefix, line)
