"""Start testbed endpoints from Python (tests, bench scripts) and control their faults.

    with Testbed([EndpointSpec("honest"), EndpointSpec("honest-2", process=1),
                  EndpointSpec("swap", fault={"substitute": "gemma3-270m"})]) as tb:
        tb.base_url("honest")        # "http://127.0.0.1:<port>/honest/v1"
        tb.set_fault("honest", {"logit_noise": 0.5, "seed": 1}); tb.clear_fault("honest")

One server process per distinct `process` index, each on a free loopback port in its own
process group. `stop()` (or leaving the `with`) kills the groups; a server also exits by itself
when the process that started it dies, so a killed test run leaves nothing behind.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from probes.testbed.endpoints import READY_LINE, EndpointSpec

__all__ = ["EndpointSpec", "Testbed", "TestbedError"]

_REPO_ROOT = Path(__file__).resolve().parents[2]


class TestbedError(RuntimeError):
    """A server that would not start, or a control request the server refused."""

    __test__ = False  # not a pytest test class


@dataclass
class _Process:
    index: int
    popen: subprocess.Popen[str]
    stderr: IO[str]
    url: str = ""

    def stderr_tail(self, chars: int = 2000) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()[-chars:].strip()


class Testbed:
    __test__ = False  # not a pytest test class

    def __init__(
        self,
        endpoints: Sequence[EndpointSpec],
        *,
        startup_timeout: float = 180.0,
        n_ctx: int = 2048,
        threads: int = 1,
        python: str = sys.executable,
    ) -> None:
        names = [e.name for e in endpoints]
        if not names or len(set(names)) != len(names):
            raise ValueError("a testbed needs at least one endpoint, with distinct names")
        self.endpoints = tuple(endpoints)
        self._startup_timeout = startup_timeout
        self._server_args = ["--n-ctx", str(n_ctx), "--threads", str(threads)]
        self._python = python
        self._processes: dict[int, _Process] = {}
        self._http: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Testbed:
        if self._processes:
            return self
        atexit.register(self.stop)
        # Long read timeout: setting a quantize fault re-quantizes the model first.
        self._http = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0))
        try:
            for index in sorted({e.process for e in self.endpoints}):
                group = [e.to_json() for e in self.endpoints if e.process == index]
                self._processes[index] = self._spawn(index, group)
            deadline = time.monotonic() + self._startup_timeout
            for proc in self._processes.values():
                proc.url = self._wait_ready(proc, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        processes, self._processes = list(self._processes.values()), {}
        if self._http is not None:
            self._http.close()
            self._http = None
        for proc in processes:
            _signal_group(proc.popen, signal.SIGTERM)
        for proc in processes:
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(proc.popen, signal.SIGKILL)
                proc.popen.wait(timeout=10)
            _signal_group(proc.popen, signal.SIGKILL)  # anything the server left in its group
            for stream in (proc.popen.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        atexit.unregister(self.stop)

    def exited(self) -> list[int]:
        """Indexes of server processes that have exited on their own."""
        return [i for i, p in self._processes.items() if p.popen.poll() is not None]

    @property
    def pids(self) -> list[int]:
        return [p.popen.pid for p in self._processes.values()]

    def _spawn(self, index: int, group: list[dict[str, Any]]) -> _Process:
        stderr = tempfile.TemporaryFile(mode="w+", prefix=f"testbed-{index}-")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        cmd = [self._python, "-m", "probes.testbed.server", "--endpoints", json.dumps(group)]
        cmd += ["--parent-pid", str(os.getpid()), *self._server_args]
        popen = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, start_new_session=True, cwd=_REPO_ROOT
        )
        return _Process(index, popen, stderr)

    def _wait_ready(self, proc: _Process, deadline: float) -> str:
        assert proc.popen.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.popen.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not sel.select(timeout=min(left, 0.5)):
                    if proc.popen.poll() is not None:
                        break
                    continue
                line = proc.popen.stdout.readline()
                if line.startswith(READY_LINE):
                    return line[len(READY_LINE) :].strip()
                if not line:  # EOF: the server exited
                    break
        try:  # after EOF the server is exiting: give it a moment, for its exit code
            proc.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        state = f"exited with {proc.popen.returncode}" if proc.popen.returncode is not None else "timed out"
        raise TestbedError(f"testbed process {proc.index} {state} before it was ready: {proc.stderr_tail() or 'no stderr'}")

    # -- endpoints -------------------------------------------------------------------------

    def _process_of(self, name: str) -> _Process:
        for e in self.endpoints:
            if e.name == name:
                if e.process not in self._processes:
                    raise TestbedError("the testbed is not running")
                return self._processes[e.process]
        raise KeyError(f"no testbed endpoint named {name!r}")

    def base_url(self, name: str) -> str:
        """The endpoint's OpenAI base URL: `.../{name}/v1`."""
        return f"{self._process_of(name).url}/{name}/v1"

    def control_url(self, name: str) -> str:
        return f"{self._process_of(name).url}/_testbed"

    def set_fault(self, name: str, fault: Mapping[str, Any]) -> dict[str, Any]:
        """Serve `fault` from now on (`{}` is honest); resets the endpoint's counts."""
        response = self._client().put(f"{self.control_url(name)}/endpoints/{name}/fault", json=dict(fault))
        return self._json(response)

    def clear_fault(self, name: str) -> dict[str, Any]:
        return self.set_fault(name, {})

    def describe(self, name: str) -> dict[str, Any]:
        data = self._json(self._client().get(f"{self.control_url(name)}/endpoints"))["data"]
        return next(ep for ep in data if ep["name"] == name)

    def counts(self, name: str) -> dict[str, int]:
        """Requests served since the fault was set, and how many each fault touched."""
        return dict(self.describe(name)["counts"])

    def _client(self) -> httpx.Client:
        if self._http is None:
            raise TestbedError("the testbed is not running")
        return self._http

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise TestbedError(f"testbed answered {response.status_code}: {message}")
        return response.json()  # type: ignore[no-any-return]


def _signal_group(popen: subprocess.Popen[str], sig: signal.Signals) -> None:
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
