"""Where the record writer's batches go: a `BatchStore` writes a batch (returning the records the
database refused as data) and replays a spill file.

- `ProcessStore` (the default) hands batches to a child process (`gateway.persistence.worker`)
  over asyncio pipes. The gateway process does no database work at all: a writer thread would
  share the GIL with the event loop, and measured inside a loaded server its hand-offs cost far
  more than the writes themselves (bench/persistence_overhead.py).
- `ThreadStore` runs a write function in one thread of this process (tests, and the `thread`
  setting).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import orjson

from gateway.persistence.config import DatabaseConfig
from gateway.persistence.records import Stamped, encode_row
from gateway.persistence.spill import SpillFile, replay_file

log = logging.getLogger("gateway.persistence")
FRAME = struct.Struct(">I")


class StoreError(Exception):
    """The store could not take the batch (database down, worker gone); the writer retries."""


class BatchStore(Protocol):
    async def open(self) -> None:
        """Start what writes need (the worker process) now, so the first write does not pay for it:
        that write may come at shutdown, inside the flush budget."""
        ...

    async def write(self, batch: Sequence[Stamped]) -> Sequence[Stamped]: ...

    async def replay(self, spill: SpillFile, batch_size: int) -> tuple[int, int]:
        """Write the spill file's replay file; returns (records written, records refused)."""
        ...

    async def aclose(self) -> None: ...


class ThreadStore:
    def __init__(self, write: Callable[[Sequence[Stamped]], Sequence[Stamped]]) -> None:
        self._write = write
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-db-writer")

    async def open(self) -> None:
        pass

    async def write(self, batch: Sequence[Stamped]) -> Sequence[Stamped]:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._write, batch)

    async def replay(self, spill: SpillFile, batch_size: int) -> tuple[int, int]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, replay_file, self._write, spill, batch_size
        )

    async def aclose(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


class ProcessStore:
    """One worker process, started by `open` (else on first use) and again after it dies; one call at a time."""

    def __init__(self, database: DatabaseConfig) -> None:
        self._config = database.model_dump_json()
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._killed: list[asyncio.subprocess.Process] = []  # discarded workers, reaped at close
        self._served = False  # whether the current worker has answered a call (it is past its imports)

    async def open(self) -> None:
        # The worker imports SQLAlchemy and the driver on its own: it gets ready while this serves.
        async with self._lock:
            await self._started()

    async def write(self, batch: Sequence[Stamped]) -> Sequence[Stamped]:
        reply = await self._call({"op": "write", "rows": [encode_row(at, r) for at, r in batch]})
        return [batch[i] for i in reply["rejected"]]

    async def replay(self, spill: SpillFile, batch_size: int) -> tuple[int, int]:
        reply = await self._call(
            {"op": "replay", "spill": str(spill.path), "max_bytes": spill.max_bytes, "batch_size": batch_size}
        )
        return int(reply["written"]), int(reply["rejected"])

    async def aclose(self) -> None:
        killed, self._killed = self._killed, []
        for dead in killed:
            await dead.wait()
        proc, self._proc = self._proc, None
        killed, self._killed = self._killed, []
        for dead in killed:  # a worker killed mid-call (a write cut short at shutdown) is reaped here
            try:
                await asyncio.wait_for(dead.wait(), 5.0)
            except TimeoutError:
                pass
        if proc is None or proc.returncode is not None:
            return
        if not self._served and not self._lock.locked():  # only its config was sent: nothing to lose
            proc.kill()
            await proc.wait()
            return
        assert proc.stdin is not None
        proc.stdin.close()  # the worker exits at end of input
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            proc = await self._started()
            assert proc.stdin is not None and proc.stdout is not None
            body = orjson.dumps(request)
            try:
                proc.stdin.write(FRAME.pack(len(body)) + body)
                await proc.stdin.drain()
                (size,) = FRAME.unpack(await proc.stdout.readexactly(FRAME.size))
                reply: dict[str, Any] = orjson.loads(await proc.stdout.readexactly(size))
                self._served = True
            except BaseException as exc:
                # A call cut short leaves the pipe mid-frame: start a fresh worker next time.
                self._discard(proc)
                if isinstance(exc, (ConnectionError, asyncio.IncompleteReadError, OSError)):
                    raise StoreError(f"the persistence worker stopped ({type(exc).__name__})") from None
                raise
        if not reply.get("ok"):
            raise StoreError(reply.get("error", "the persistence worker failed"))
        return reply

    async def _started(self) -> asyncio.subprocess.Process:
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        self._killed = [dead for dead in self._killed if dead.returncode is None]
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.persistence.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        # The config (its URL may hold a password) goes down the pipe as the first frame, never on
        # the command line, where any local user can read it (`ps`, /proc/PID/cmdline).
        assert proc.stdin is not None
        config = self._config.encode()
        proc.stdin.write(FRAME.pack(len(config)) + config)
        self._proc, self._served = proc, False
        return proc

    def _discard(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            proc.kill()
            self._killed = [p for p in self._killed if p.returncode is None] + [proc]
        self._proc = None
