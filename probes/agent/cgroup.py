"""A throwaway cgroup per sandbox run: `pids.max` caps processes and threads, the memory limit
covers everything the run allocates (its scratch tmpfs included), the CPU quota caps its rate, and
the member list lets the parent kill every process of the run, including ones that left the process
group.

cgroup v2 (one directory, the controllers enabled for our cgroup's children) is preferred; cgroup v1
hierarchies (`pids`, `memory`, `cpu`) are used for the controllers v2 does not offer.
`SandboxCgroup.create` returns None where no controller is writable; `controllers` says which
limits it enforces, and the sandbox falls back to rlimits for the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

CONTROLLERS = ("pids", "memory", "cpu")
CPU_PERIOD_US = 100_000
PREFIX = "agent-sandbox-"
# A run's directory older than this and empty was left by a gateway that was killed: nobody else
# will remove it. (The kernel refuses to remove one that still has members.)
STALE_AFTER_S = 300.0


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


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


class SandboxCgroup:
    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs  # controller -> the directory enforcing it (one for v2, one per v1 hierarchy)

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.dirs)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    @classmethod
    def create(cls, max_pids: int, memory_bytes: int, cpu_cores: float) -> SandboxCgroup | None:
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        own = _own_paths()
        dirs: dict[str, Path] = {}
        for mountpoint, fstype, options in _mounts():
            if fstype == "cgroup2" and "" in own:
                parent = Path(mountpoint) / own[""].lstrip("/")
                try:
                    offered = set((parent / "cgroup.subtree_control").read_text().split())
                except OSError:
                    continue
                wanted = [c for c in CONTROLLERS if c in offered and c not in dirs]
                if wanted and _mkdir(parent / name):
                    dirs.update({c: parent / name for c in wanted})
            elif fstype == "cgroup":
                for controller in CONTROLLERS:
                    if controller in options and controller not in dirs and controller in own:
                        path = Path(mountpoint) / own[controller].lstrip("/") / name
                        if _mkdir(path):
                            dirs[controller] = path
        cgroup = cls(dirs)
        cgroup._apply(max_pids, memory_bytes, cpu_cores)
        return cgroup if cgroup.dirs else None

    def _apply(self, max_pids: int, memory_bytes: int, cpu_cores: float) -> None:
        for controller in list(self.dirs):
            d = self.dirs[controller]
            v2 = (d / "cgroup.controllers").exists()
            if controller == "pids":
                ok = _write(d / "pids.max", str(max_pids))
            elif controller == "memory" and v2:
                ok = _write(d / "memory.max", str(memory_bytes))
                _write(d / "memory.swap.max", "0")
            elif controller == "memory":
                ok = _write(d / "memory.limit_in_bytes", str(memory_bytes))
                _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))  # absent without swap accounting
            else:
                quota = max(1000, int(cpu_cores * CPU_PERIOD_US))
                if v2:
                    ok = _write(d / "cpu.max", f"{quota} {CPU_PERIOD_US}")
                else:
                    ok = _write(d / "cpu.cfs_period_us", str(CPU_PERIOD_US)) and _write(d / "cpu.cfs_quota_us", str(quota))
            if not ok:
                # A controller we cannot set enforces nothing: leave it to the rlimits.
                self._rmdir_if_unused(controller)

    def _rmdir_if_unused(self, controller: str) -> None:
        d = self.dirs.pop(controller)
        if d not in self.dirs.values():
            with contextlib.suppress(OSError):
                d.rmdir()

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in procs.read_text().split())
        return sorted(found)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a member for the memory limit."""
        d = self.dirs.get("memory")
        if d is None:
            return False
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError):
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        return False

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
        """Kill what is left and remove the directories (rmdir fails while a dying member remains)."""
        self.kill_all(timeout)
        for d in dict.fromkeys(self.dirs.values()):
            deadline = time.monotonic() + timeout
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)


def _mkdir(path: Path) -> bool:
    _sweep_stale(path.parent)
    try:
        path.mkdir()
        return True
    except OSError:
        return False


def _sweep_stale(parent: Path) -> None:
    now = time.time()
    with contextlib.suppress(OSError):
        for d in parent.glob(PREFIX + "*"):
            with contextlib.suppress(OSError):
                if now - d.stat().st_mtime > STALE_AFTER_S:
                    d.rmdir()
