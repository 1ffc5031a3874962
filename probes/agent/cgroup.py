"""A throwaway pids cgroup per sandbox run: its `pids.max` caps how many processes and threads the
sandboxed code can have at once (RLIMIT_NPROC does not bind root), and its member list lets the
parent kill every process of the run, including ones that left the process group.

Works with cgroup v1 (a `pids` hierarchy) and v2 (a `pids` controller enabled for our cgroup's
children). `PidsCgroup.create` returns None where neither is writable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path


def _mounts() -> list[tuple[str, str, set[str]]]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            out.append((fields[1], fields[2], set(fields[3].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _candidate_parents() -> list[Path]:
    own = _own_paths()
    parents = []
    for mountpoint, fstype, options in _mounts():
        if fstype == "cgroup" and "pids" in options and "pids" in own:
            parents.append(Path(mountpoint) / own["pids"].lstrip("/"))
        elif fstype == "cgroup2" and "" in own:
            parents.append(Path(mountpoint) / own[""].lstrip("/"))
    return parents


class PidsCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        for parent in _candidate_parents():
            path = parent / f"agent-sandbox-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_pids))
                return cls(path)
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
        return None

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs_file.read_text().split()]
        except OSError:
            return []

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every member until none is left (a fork loop may add some meanwhile)."""
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        return True

    def remove(self, timeout: float = 5.0) -> None:
        """Kill what is left and remove the cgroup (rmdir fails while a dying member remains)."""
        self.kill_all(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
