"""Process management for the bench scripts: pinned servers, CPU accounting, a quiet machine."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from loadgen import now, request_bytes

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Server:
    """A child process in its own session, pinned to `cpus`; `stop()` ends its whole group."""

    def __init__(self, name: str, cmd: list[str], cpus: set[int], workdir: Path, port: int, ready_path: str,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.log, self.port, self.ready_path = name, workdir / f"{name}.log", port, ready_path
        self.startup_s = float("nan")
        self.started = now()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
                env={**os.environ, **env} if env else None,
            )
        with suppress(ProcessLookupError):  # if it died at once, wait_ready says why
            os.sched_setaffinity(self.proc.pid, cpus)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Sets `startup_s`: seconds from launch to the first 200 on `ready_path`."""
        probe = request_bytes("GET", self.ready_path, self.port)
        while now() - self.started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(probe)
                    if sock.recv(65536).startswith(b"HTTP/1.1 200"):
                        self.startup_s = now() - self.started
                        return
            except OSError:
                pass
            time.sleep(0.005)
        raise RuntimeError(f"{self.name} was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def cpu_s(self) -> float:
        """The process's CPU time: its CPU-time clock (exact), else utime + stime (in ticks)."""
        try:
            return time.clock_gettime(((~self.proc.pid) << 3) | 2)  # Linux: the process's CPUCLOCK_SCHED
        except OSError:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited during the run:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; then SIGKILL for anything it left in its group."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


@contextmanager
def started(server: Server) -> Iterator[Server]:
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def own_cpu_s() -> float:
    t = os.times()  # children: wrk, once waited for
    return t.user + t.system + t.children_user + t.children_system


def wait_quiet(limit: float, threshold: float = 0.15) -> float:
    """Waits up to `limit` s for a 2 s window in which the machine uses under `threshold` cores."""
    deadline = now() + limit
    while True:
        start, busy = now(), machine_busy_s()
        time.sleep(2.0)
        cores = (machine_busy_s() - busy) / (now() - start)
        if cores < threshold or now() >= deadline:
            return cores
        print(f"waiting for the machine to be quiet: {cores:.2f} cores busy", flush=True)


@contextmanager
def cpu_meter(target: Server, ours: list[Server], out: dict[str, float]) -> Iterator[None]:
    """Fills `out` with the target's CPU seconds and the cores used by processes outside the bench."""
    start = (now(), target.cpu_s(), sum(s.cpu_s() for s in ours) + own_cpu_s(), machine_busy_s())
    yield
    wall = now() - start[0]
    out["server_cpu_s"] = target.cpu_s() - start[1]
    bench = sum(s.cpu_s() for s in ours) + own_cpu_s() - start[2]
    out["foreign_cores"] = max(0.0, (machine_busy_s() - start[3] - bench) / wall)
