"""The spill file: request records that did not fit in the queue, one JSON line each, appended.

Appends happen on the event loop (a buffered write, on the degraded path only). To replay, the
writer rotates the file (``<path>.replay``) so new spills go to a fresh file while the old one is
read in batches; the replay file is removed once every batch is in the database. The number of
lines already replayed is kept beside it (``<path>.replay.done``), so a crash mid-replay resumes
where it stopped instead of inserting twice. Rotation only flushes and renames; the old file's
fsync is `settle()`, which the writer runs in a thread.

A process killed mid-append leaves a torn last line: opening the file cuts it off, so the next
record starts a line of its own instead of merging with the fragment (and both being lost).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from gateway.persistence.records import Stamped, decode_line, encode_line
from kernel.records import RequestRecord

log = logging.getLogger("gateway.persistence")


class SpillFull(Exception):
    """The spill file reached its size limit."""


class SpillFile:
    def __init__(self, path: str | Path, max_bytes: int, *, repair: bool = False) -> None:
        """`repair`: cut a torn last line, for the process that appends (never a reader beside it)."""
        self.path = Path(path)
        self.replay_path = self.path.with_name(self.path.name + ".replay")
        self.done_path = self.path.with_name(self.path.name + ".replay.done")
        self.max_bytes = max_bytes
        self._file: BinaryIO | None = None
        self._unsynced: set[Path] = set()  # closed without their fsync, waiting for `settle`
        if repair:
            self._size = _repair_torn_tail(self.path)
        else:
            self._size = self.path.stat().st_size if self.path.exists() else 0
        self._replay_size = self.replay_path.stat().st_size if self.replay_path.exists() else 0

    @property
    def size(self) -> int:
        """Bytes on disk waiting to reach the database (the spill file and one being replayed)."""
        return self._size + self._replay_size

    def pending(self) -> bool:
        return self._size > 0 or self.replay_path.exists()

    def append(self, at: float, record: RequestRecord) -> None:
        """Raises SpillFull past `max_bytes`, OSError when the file cannot be written."""
        line = encode_line(at, record)
        if self.size + len(line) > self.max_bytes:
            raise SpillFull(f"spill file {self.path} is at its limit of {self.max_bytes} bytes")
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 0600: records name keys and models (and hold bodies when those are kept).
            self._file = os.fdopen(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        self._file.write(line)
        self._size += len(line)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flush, fsync and close (blocking)."""
        self.release()
        self.settle()

    def release(self) -> None:
        """Close the open file without its fsync (that is `settle`'s); a later append opens it again."""
        if self._file is not None:
            self._file.close()  # flushes into the OS: a killed process keeps it, a reader sees it
            self._file = None
            self._unsynced.add(self.path)

    def settle(self) -> None:
        """Fsync what `release` and `rotate` closed. Blocking: the writer runs it in a thread."""
        while self._unsynced:
            path = self._unsynced.pop()
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # already replayed and removed
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rotate(self) -> bool:
        """Move pending lines to the replay file (unless one is still being replayed). No fsync
        here (it runs on the event loop): that waits for `settle`."""
        if self.replay_path.exists():
            return True
        if self._size == 0:
            return False
        self.release()
        os.replace(self.path, self.replay_path)
        self._unsynced.discard(self.path)
        self._unsynced.add(self.replay_path)
        self.done_path.unlink(missing_ok=True)
        self._replay_size, self._size = self._size, 0
        return True

    def replay_batches(self, batch_size: int) -> Iterator[tuple[list[Stamped], int]]:
        """Yield (records, lines consumed so far) from the replay file, skipping lines already done.
        Call `mark_done(lines)` after each batch is stored, `finish_replay()` at the end."""
        done = int(self.done_path.read_text() or 0) if self.done_path.exists() else 0
        batch: list[Stamped] = []
        consumed = 0
        with open(self.replay_path, "rb") as f:
            for line in f:
                consumed += 1
                if consumed <= done or not line.strip():
                    continue
                try:
                    batch.append(decode_line(line))
                except (ValueError, TypeError, KeyError):  # a torn last line from a crash
                    continue
                if len(batch) >= batch_size:
                    yield batch, consumed
                    batch = []
        if batch:
            yield batch, consumed

    def mark_done(self, lines: int) -> None:
        tmp = self.done_path.with_name(self.done_path.name + ".tmp")
        tmp.write_text(str(lines))
        os.replace(tmp, self.done_path)

    def finish_replay(self) -> None:
        self.replay_path.unlink(missing_ok=True)
        self.done_path.unlink(missing_ok=True)
        self._replay_size = 0


def _repair_torn_tail(path: Path) -> int:
    """Cut a torn last line (no newline: a crash mid-append) off the file; returns its new size."""
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return size
            # Find the last newline, reading backwards in blocks.
            end = size
            while end > 0:
                start = max(0, end - 65536)
                f.seek(start)
                block = f.read(end - start)
                cut = block.rfind(b"\n")
                if cut >= 0:
                    end = start + cut + 1
                    break
                end = start
            f.truncate(end)
            log.warning("spill file %s: cut a torn last line of %d bytes (a crash mid-write)", path, size - end)
            return end
    except FileNotFoundError:
        return 0


def replay_file(
    write: Callable[[Sequence[Stamped]], Sequence[Stamped]], spill: SpillFile, batch_size: int
) -> tuple[int, int]:
    """Write a rotated spill file's records in batches, remembering progress after each batch;
    returns (records written, records the database refused). Blocking: a thread or the worker."""
    written = refused = 0
    for batch, lines in spill.replay_batches(batch_size):
        rejected = write(batch)
        spill.mark_done(lines)
        written += len(batch) - len(rejected)
        refused += len(rejected)
    spill.finish_replay()
    return written, refused
