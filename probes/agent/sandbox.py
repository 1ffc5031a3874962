"""Run untrusted Python under bubblewrap (`bwrap`, Debian's `bubblewrap`, what Flatpak uses).

What the code gets, as root and as an unprivileged user alike:
- a new user namespace whose uid maps to an unprivileged host uid (as root, `sandbox_boot` first
  drops to `sandbox_ids`, 65534 by default), all capabilities dropped, `no_new_privs`, no nested
  user namespaces, and the seccomp filter of `probes.agent.seccomp`;
- new PID, network (loopback only), IPC, UTS and cgroup namespaces, a fresh `/proc` of its own PID
  namespace and a minimal `/dev`;
- a file system that holds only what an allow-list binds, read-only: the interpreter (its binary,
  standard library, libpython and the system library directory), plus the task files, read-only,
  in `/sandbox`, a private tmpfs of `scratch_bytes` that is the only writable place;
- memory, pids and CPU limits from a cgroup (`probes.agent.cgroup`) where the host offers one, and
  rlimits (address space, processes, CPU seconds, file size, open files) in any case;
- an empty environment, `python -I -S`, a wall-clock timeout, size-capped output on sockets the
  parent drains (fds 0-2 cannot be replaced: see `probes.agent.seccomp`), and death with
  the parent (`--die-with-parent`; the PID namespace takes every process of the run with it).

`Sandbox` is the interface; `SubprocessSandbox` the implementation; `probes.agent.fake_sandbox`
the fake. `SandboxUnavailable` is raised, and nothing runs, when any of this cannot be set up
(no bwrap, no user namespaces, no interpreter the sandbox uid can read).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from probes.agent.cgroup import SandboxCgroup
from probes.agent.seccomp import compiled_filter_fd

BOOT = Path(__file__).with_name("sandbox_boot.py")
REFUSED = 97  # sandbox_boot's exit code when isolation failed
SCRATCH = "/sandbox"
NOBODY = (65534, 65534)
MiB = 1024 * 1024
_INTERPRETER_PROBE = (
    "import json, sys, sysconfig\n"
    "v = sysconfig.get_config_var\n"
    "lib = (v('LIBDIR') or '') + '/' + (v('INSTSONAME') or v('LDLIBRARY') or '') if v('Py_ENABLE_SHARED') else ''\n"
    "print(json.dumps({'executable': sys.executable, 'stdlib': sysconfig.get_path('stdlib'),\n"
    "                  'platstdlib': sysconfig.get_path('platstdlib'), 'libpython': lib,\n"
    "                  'multiarch': v('MULTIARCH') or ''}))\n"
)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be set up here; nothing was run."""


@dataclass(frozen=True, slots=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MiB
    file_bytes: int = 4 * MiB
    processes: int = 32  # processes and threads at once
    open_files: int = 64
    output_bytes: int = 64 * 1024  # kept of stdout and of stderr each
    scratch_bytes: int = 16 * MiB  # the writable tmpfs
    cpu_cores: float = 1.0  # the cgroup's CPU quota


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
        limits: Limits | None = None, pass_fds: Sequence[int] = (), stop: threading.Event | None = None,
    ) -> SandboxResult:
        """Put `files` into a fresh scratch dir, run `python -I -S <script> <args>` there; the code
        inherits `pass_fds` under the same numbers (the grader's link between judge and solution).
        Setting `stop` ends the run early (killed_by "stopped")."""
        ...


def _killed_by(exit_code: int, stderr: str, oom: bool) -> str | None:
    """bwrap exits 128+N when its child died of signal N; Python turns some limits into exceptions."""
    if 128 < exit_code <= 128 + 64:
        sig = exit_code - 128
        if sig == signal.SIGKILL and oom:
            return "memory"
        if sig == signal.SIGXCPU:
            return "cpu"
        if sig == signal.SIGXFSZ:
            return "file_size"
        try:
            return f"signal:{signal.Signals(sig).name}"
        except ValueError:
            return f"signal:{sig}"
    if exit_code != 0:
        if "MemoryError" in stderr[-2000:]:
            return "memory"
        if "File too large" in stderr[-2000:]:
            return "file_size"
    return None


class _CappedDrain:
    """Reads one of the code's output streams to its end on a thread of its own, keeping the first
    `cap` bytes and discarding the rest, so the code never blocks on a full buffer and a flood costs
    no memory."""

    def __init__(self, sock: socket.socket, cap: int) -> None:
        self._sock, self._cap = sock, cap
        self._chunks: list[bytes] = []
        self._kept = 0
        self.truncated = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := self._sock.recv(65536):
                room = self._cap - self._kept
                if len(chunk) > room:
                    self.truncated = True
                    chunk = chunk[:room]
                if chunk:
                    self._chunks.append(chunk)
                    self._kept += len(chunk)
        except OSError:
            pass
        finally:
            self._sock.close()

    def text(self, timeout: float) -> str:
        """What was kept, once every writer has closed its end (or after `timeout`)."""
        self._thread.join(timeout)
        return b"".join(self._chunks[:]).decode("utf-8", "replace")


def _json_documents(text: str) -> dict[str, object]:
    """bwrap's --json-status-fd writes one JSON object after another; merged into one dict."""
    decoder, merged, i = json.JSONDecoder(), {}, 0
    while (i := _skip_space(text, i)) < len(text):
        doc, i = decoder.raw_decode(text, i)
        merged.update(doc)
    return merged


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _reachable(path: str, as_other: bool) -> bool:
    """Whether the sandbox uid can read `path`: as "other" for a root gateway's files (it runs as
    a uid that owns nothing), as this process otherwise (the user namespace maps to our own uid)."""
    if not os.path.exists(path):
        return False
    if not as_other:
        return os.access(path, os.R_OK)
    p = Path(path)
    for d in p.parents:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(p).st_mode
    return bool(mode & stat.S_IROTH) and (not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH))


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass  # the code exited (or was killed) without reading it all
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class SubprocessSandbox:
    def __init__(
        self, limits: Limits | None = None, *, python: str | None = None, bwrap: str | None = None,
        sandbox_ids: tuple[int, int] = NOBODY,
    ) -> None:
        self.limits = limits or Limits()
        # The gateway's own interpreter, or the system's when a root gateway's sits where the
        # sandbox uid cannot read it (pyenv under /root, a virtualenv under a 0700 home).
        candidates = [python] if python else [sys.executable, "/usr/bin/python3"]
        self._candidates = [str(Path(c).resolve()) for c in candidates]
        self._bwrap = bwrap if bwrap is not None else shutil.which("bwrap")
        self._sandbox_ids = sandbox_ids
        self._binds: tuple[str, list[str]] | None = None

    def _interpreter(self, as_other: bool) -> tuple[str, list[str]]:
        """The interpreter to run and the bwrap arguments that bind it (and its libraries) read-only."""
        if self._binds is not None:
            return self._binds
        for python in self._candidates:
            if not _reachable(python, as_other):
                continue
            try:
                out = subprocess.run([python, "-I", "-S", "-c", _INTERPRETER_PROBE], env={}, capture_output=True,
                                     timeout=60, check=True).stdout
                info = json.loads(out)
            except (OSError, subprocess.SubprocessError, ValueError):
                continue
            paths = [python, info["stdlib"], info["platstdlib"], info["libpython"]]
            arch = info["multiarch"]
            paths += [f"/usr/lib/{arch}" if arch else "", "/usr/lib64"]
            args: list[str] = []
            for top in ("/lib", "/lib64", "/bin"):
                if os.path.islink(top):
                    args += ["--symlink", os.readlink(top), top]
                elif arch and top == "/lib":
                    paths.append(f"/lib/{arch}")
                elif top == "/lib64":
                    paths.append("/lib64")
            kept = [p for p in dict.fromkeys(paths) if p and os.path.exists(p)]
            if not all(_reachable(p, as_other) for p in kept):
                continue
            for p in kept:
                args += ["--ro-bind", p, p]
            self._binds = (python, args)
            return self._binds
        raise SandboxUnavailable(f"no interpreter the sandbox uid can read among {self._candidates}: refusing to run")

    def run(
        self, files: Mapping[str, str], script: str, *, args: Sequence[str] = (), stdin: str = "",
        limits: Limits | None = None, pass_fds: Sequence[int] = (), stop: threading.Event | None = None,
    ) -> SandboxResult:
        lim = limits or self.limits
        if not self._bwrap or not os.access(self._bwrap, os.X_OK):
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed: refusing to run")
        as_root = os.geteuid() == 0
        python, interpreter_binds = self._interpreter(as_other=as_root)
        cgroup = SandboxCgroup.create(lim.processes, lim.memory_bytes, lim.cpu_cores)
        fds: list[int] = []
        try:
            fds.append(compiled_filter_fd())
            bwrap = [self._bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                     "--unshare-uts", "--unshare-cgroup-try", "--disable-userns", "--die-with-parent",
                     "--new-session", "--cap-drop", "ALL", "--clearenv", "--hostname", "sandbox",
                     *interpreter_binds, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
                     "--size", str(lim.scratch_bytes), "--perms", "0755", "--tmpfs", SCRATCH]
            for name, content in files.items():
                if "/" in name or name in ("", ".", ".."):
                    raise ValueError(f"not a plain file name: {name!r}")
                fds.append(_memfd(name, content.encode()))
                bwrap += ["--ro-bind-data", str(fds[-1]), f"{SCRATCH}/{name}"]
            bwrap += ["--remount-ro", "/", "--chdir", SCRATCH, "--seccomp", str(fds[0])]
            return self._run(bwrap, fds, cgroup, python, script, args, stdin, lim, as_root, tuple(pass_fds), stop)
        finally:
            for fd in fds:
                os.close(fd)
            if cgroup is not None:
                cgroup.remove()

    def _run(
        self, bwrap: list[str], fds: list[int], cgroup: SandboxCgroup | None, python: str,
        script: str, args: Sequence[str], stdin: str, lim: Limits, as_root: bool, passed: tuple[int, ...],
        stop: threading.Event | None,
    ) -> SandboxResult:
        status_r, status_w = os.pipe()
        enforced = cgroup.controllers if cgroup else frozenset()
        limits = {
            "cpu": (lim.cpu_seconds, lim.cpu_seconds + 1),
            "as": (lim.memory_bytes, lim.memory_bytes),
            "fsize": (lim.file_bytes, lim.file_bytes),
            "nofile": (lim.open_files, lim.open_files),
            "core": (0, 0),
        }
        if "pids" not in enforced:
            # RLIMIT_NPROC counts every task of the uid on the host (the gateway's own threads, when
            # the code runs as the gateway's uid): give the code its own budget above those.
            uid = self._sandbox_ids[0] if as_root else os.getuid()
            nproc = lim.processes + tasks_of_uid(uid)
            limits["nproc"] = (nproc, nproc)
        spec = {
            "cgroup_procs": [str(p) for p in cgroup.procs_files] if cgroup else [],
            "limits": limits,
            "drop_to": list(self._sandbox_ids) if as_root else None,
            "parent": os.getpid(),
        }
        argv = [sys.executable, "-I", "-S", str(BOOT), json.dumps(spec), "--",
                *bwrap, "--json-status-fd", str(status_w), "--", python, "-I", "-S", f"{SCRATCH}/{script}", *args]
        started = time.monotonic()
        # Sockets, not files: nothing is left on the host if the gateway is killed mid-run, and the
        # code holds only a sending end, which it cannot seek, read back, or reopen through
        # /proc/self/fd (a pipe's write end could be reopened for reading).
        out_r, out_w = socket.socketpair()
        err_r, err_w = socket.socketpair()
        try:
            for end in (out_w, err_w):
                end.shutdown(socket.SHUT_RD)
            # stdin is a pipe, not a file: what the code reads is gone, and cannot be read again
            # through /proc/<pid>/fd/0.
            proc = subprocess.Popen(argv, cwd="/", stdin=subprocess.PIPE, stdout=out_w.fileno(),
                                    stderr=err_w.fileno(), env={}, pass_fds=(*fds, status_w, *passed),
                                    start_new_session=True)
        except BaseException:
            out_r.close()
            err_r.close()
            raise
        finally:
            os.close(status_w)
            out_w.close()
            err_w.close()
        drains = (_CappedDrain(out_r, lim.output_bytes), _CappedDrain(err_r, lim.output_bytes))
        assert proc.stdin is not None
        feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True)
        feeder.start()
        timed_out = stopped = False
        deadline = started + lim.wall_seconds
        while True:
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(0.0, min(left, 0.05) if stop is not None else left))
                break
            except subprocess.TimeoutExpired:
                timed_out = time.monotonic() >= deadline
                stopped = not timed_out and stop is not None and stop.is_set()
                if timed_out or stopped:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        duration = time.monotonic() - started
        feeder.join(timeout=5)
        oom = cgroup.oom_killed() if cgroup else False
        if cgroup is not None:
            cgroup.kill_all()
        # Every process of the run is gone with bwrap's PID namespace, so the streams end now.
        stdout, stderr = (d.text(timeout=5) for d in drains)
        with os.fdopen(status_r, "rb") as f:
            status = _json_documents(f.read().decode("utf-8", "replace"))
        truncated = drains[0].truncated or drains[1].truncated
        if "child-pid" not in status or (status.get("exit-code") == 1 and stderr.startswith("bwrap: ")):
            raise SandboxUnavailable(f"the sandbox could not start (exit {proc.returncode}): {stderr.strip()[-500:]}")
        if timed_out or "exit-code" not in status:
            # No exit code: bwrap died with the run (the timeout, or a kill from outside).
            killed_by = "timeout" if timed_out else "stopped" if stopped else "signal:SIGKILL"
            return SandboxResult(None, timed_out, killed_by, stdout, stderr, truncated, duration)
        code = int(status["exit-code"])  # type: ignore[call-overload]
        exit_code = None if 128 < code <= 128 + 64 else code
        return SandboxResult(exit_code, False, _killed_by(code, stderr, oom), stdout, stderr, truncated, duration)


def tasks_of_uid(uid: int, proc: Path = Path("/proc")) -> int:
    """How many tasks (processes and threads) run with this real uid now."""
    count = 0
    for status in proc.glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue  # it ended while we looked
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count
