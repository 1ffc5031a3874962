"""Run untrusted Python in a subprocess: a scratch dir removed afterwards, rlimits (CPU, address
space, file size, processes, open files), a pids cgroup, a wall-clock timeout that kills every
process of the run, no network, a read-only file system outside the scratch dir with the
gateway's working and home directories hidden under empty mounts, a stripped environment,
`python -I -S`, and captured, size-capped output.

`Sandbox` is the interface; `SubprocessSandbox` the implementation (see `sandbox_boot` for what
happens inside); `probes.agent.fake_sandbox.FakeSandbox` the fake. `SandboxUnavailable` is raised,
and nothing runs, when isolation cannot be set up: never run with network rather than without.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from probes.agent.cgroup import PidsCgroup

BOOT = Path(__file__).with_name("sandbox_boot.py")
REFUSED = 97  # sandbox_boot's exit code when isolation failed
MiB = 1024 * 1024


class SandboxUnavailable(RuntimeError):
    """Isolation (network, process limits) cannot be set up here; nothing was run."""


@dataclass(frozen=True, slots=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MiB
    file_bytes: int = 4 * MiB
    processes: int = 32  # processes and threads at once
    open_files: int = 64
    output_bytes: int = 64 * 1024  # kept of stdout and of stderr each


@dataclass(frozen=True, slots=True)
class SandboxResult:
    exit_code: int | None  # None when a signal or the timeout ended it
    timed_out: bool
    killed_by: str | None  # "timeout", "cpu", "memory", "file_size", "signal:SIGSEGV", ...
    stdout: str
    stderr: str
    truncated: bool
    duration: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Sandbox(Protocol):
    def run(
        self, files: Mapping[str, str], script: str, *, args: Sequence[str] = (), stdin: str = "",
        limits: Limits | None = None,
    ) -> SandboxResult:
        """Write `files` into a fresh scratch dir, run `python -I -S <script> <args>` there."""
        ...


def _killed_by(status: int, stderr: str) -> str | None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "cpu"
        if sig == signal.SIGXFSZ:
            return "file_size"
        return f"signal:{signal.Signals(sig).name}"
    if os.WEXITSTATUS(status) != 0:
        # Python turns both limits into exceptions rather than signals.
        if "MemoryError" in stderr[-2000:]:
            return "memory"
        if "File too large" in stderr[-2000:]:
            return "file_size"
    return None


def _read_capped(path: Path, cap: int) -> tuple[str, bool]:
    with path.open("rb") as f:
        data = f.read(cap + 1)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def default_hidden(python: str) -> tuple[str, ...]:
    """Directories generated code must not read (configs, databases, keys): the gateway's working
    directory and the home directories, less any that hold the interpreter the sandbox runs."""
    keep = Path(sys.base_prefix).resolve(), Path(python).resolve()
    candidates = [Path.cwd(), Path.home(), Path("/home"), Path("/srv"), Path("/etc/ssl/private")]
    hidden = []
    for path in candidates:
        path = path.resolve()
        if path == Path("/") or not path.is_dir() or any(k == path or path in k.parents for k in keep):
            continue
        hidden.append(str(path))
    return tuple(dict.fromkeys(hidden))


class SubprocessSandbox:
    def __init__(
        self, limits: Limits | None = None, *, python: str = sys.executable, hide: Sequence[str] | None = None
    ) -> None:
        self.limits = limits or Limits()
        # The real path: a virtualenv's python may sit under a directory that is hidden below.
        self._python = str(Path(python).resolve())
        self._hide = tuple(hide) if hide is not None else default_hidden(self._python)

    def _launcher(self) -> tuple[list[str], bool]:
        """The command prefix that puts the boot process in new namespaces, and whether the boot
        process must call os.unshare itself."""
        if hasattr(os, "unshare"):
            return [], True
        tool = shutil.which("unshare")
        if tool is None:
            raise SandboxUnavailable("no os.unshare (Python < 3.12) and no `unshare` tool: refusing to run")
        # --pid --fork: the boot process is the namespace's init, so all its descendants die with it.
        return [tool, "--net", "--mount", "--pid", "--fork", "--kill-child", "--"], False

    def run(
        self, files: Mapping[str, str], script: str, *, args: Sequence[str] = (), stdin: str = "",
        limits: Limits | None = None,
    ) -> SandboxResult:
        lim = limits or self.limits
        prefix, self_unshare = self._launcher()
        cgroup = PidsCgroup.create(lim.processes)
        if cgroup is None and os.geteuid() == 0:
            raise SandboxUnavailable("no writable pids cgroup, and RLIMIT_NPROC does not bind root: refusing to run")
        scratch = Path(tempfile.mkdtemp(prefix="agent-sandbox-")).resolve()
        io_dir = Path(tempfile.mkdtemp(prefix="agent-sandbox-io-"))
        try:
            for name, content in files.items():
                (scratch / name).write_text(content)
            return self._run(scratch, io_dir, cgroup, prefix, self_unshare, script, args, stdin, lim)
        finally:
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(io_dir, ignore_errors=True)

    def _run(
        self, scratch: Path, io_dir: Path, cgroup: PidsCgroup | None, prefix: list[str], self_unshare: bool,
        script: str, args: Sequence[str], stdin: str, lim: Limits,
    ) -> SandboxResult:
        status_r, status_w = os.pipe()
        spec = {
            "status_fd": status_w,
            "cgroup_procs": str(cgroup.procs_file) if cgroup else None,
            "unshare": self_unshare,
            "parent_ns": {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "mnt")},
            "scratch": str(scratch),
            "hide": [h for h in self._hide if not str(scratch).startswith(h.rstrip("/") + "/")],
            "limits": {
                "cpu": (lim.cpu_seconds, lim.cpu_seconds + 1),
                "as": (lim.memory_bytes, lim.memory_bytes),
                "fsize": (lim.file_bytes, lim.file_bytes),
                "nproc": (lim.processes, lim.processes),
                "nofile": (lim.open_files, lim.open_files),
                "core": (0, 0),
            },
            "env": {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8"},
        }
        target = [self._python, "-I", "-S", str(scratch / script), *args]
        argv = [*prefix, self._python, "-I", "-S", str(BOOT), json.dumps(spec), "--", *target]
        (io_dir / "stdin").write_text(stdin)
        started = time.monotonic()
        with (io_dir / "stdin").open("rb") as fin, (io_dir / "out").open("wb") as fout, \
                (io_dir / "err").open("wb") as ferr:
            try:
                proc = subprocess.Popen(
                    argv, cwd=scratch, stdin=fin, stdout=fout, stderr=ferr, env={}, pass_fds=(status_w,),
                    start_new_session=True,
                )
            finally:
                os.close(status_w)
            timed_out = False
            try:
                proc.wait(timeout=lim.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        duration = time.monotonic() - started
        if cgroup is not None:
            cgroup.kill_all()
        with os.fdopen(status_r, "rb") as f:
            status_lines = f.read().decode().split()
        stdout, cut_out = _read_capped(io_dir / "out", lim.output_bytes)
        stderr, cut_err = _read_capped(io_dir / "err", lim.output_bytes)
        if "ready" not in status_lines:
            raise SandboxUnavailable(f"isolation failed (exit {proc.returncode}): {stderr.strip()[-500:]}")
        if timed_out or "status" not in status_lines:
            # No status: the boot process died with the run (the timeout, or a kill from outside).
            return SandboxResult(None, timed_out, "timeout" if timed_out else "signal:SIGKILL", stdout, stderr,
                                 cut_out or cut_err, duration)
        status = int(status_lines[status_lines.index("status") + 1])
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        return SandboxResult(exit_code, False, _killed_by(status, stderr), stdout, stderr, cut_out or cut_err, duration)

