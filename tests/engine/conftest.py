"""The real gateway (`gwctl serve` in a subprocess) in front of the real llama.cpp engine.

Each `Gateway` is started from a temporary YAML config on free loopback ports, waits for
``/readyz``, and is stopped at the end; its stderr (gateway and engine logs) is kept in a file and
shown when a test fails. `GatewayProcess` also knows the engine replicas (pid, port) through the
admin API, and can tell from /proc whether any engine process is still alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"
KEY = "sk-engine-test-key-0001"
ADMIN_KEY = "sk-engine-admin-key-0002"
ENGINE_EXECUTABLE = b"llama-server"
# Start-up: the gateway imports in ~1 s and SmolLM2 loads in ~1 s; generous for a loaded CI box.
READY_TIMEOUT_S = 60.0


def gateway_config(port: int, *, replicas: int = 1, engines: list[dict[str, Any]] | None = None, **engine: Any) -> dict[str, Any]:
    """A test gateway's config: one SmolLM2 engine (with `engine`'s settings), or `engines` as given."""
    return {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "info"},
        "auth": {"keys": [{"name": "engine-tests", "key": KEY}], "admin_key": ADMIN_KEY},
        "timeouts": {"connect": 2, "first_byte": 60, "between_chunks": 60, "total": 120},
        "retry": {"attempts_per_endpoint": 2, "max_attempts": 4, "backoff_base": 0.05, "backoff_max": 0.2},
        "metrics": {"enabled": False},
        "engines": engines if engines is not None else [
            {"name": "local", "model": "smollm2", "served_model_name": MODEL, "replicas": replicas, "n_ctx": 2048, **engine}
        ],
    }


def gwctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli.gwctl", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GW_")}
    return env | extra


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is dead: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def engine_processes(port: int) -> list[int]:
    """Live processes running llama-server on `port` (from /proc/*/cmdline)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv and argv[0].endswith(ENGINE_EXECUTABLE) and b"--port" in argv:
            i = argv.index(b"--port")
            if i + 1 < len(argv) and argv[i + 1] == str(port).encode() and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class Gateway:
    """`gwctl serve` as a child process, on a free port."""

    def __init__(self, tmp: Path, *, replicas: int = 1, engines: list[dict[str, Any]] | None = None, **engine: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = tmp / f"gateway-{self.port}.yaml"
        config = gateway_config(self.port, replicas=replicas, engines=engines, **engine)
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = tmp / f"gateway-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            gwctl("serve", "-c", str(self.config_path)),
            cwd=REPO_ROOT,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.admin = httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> Gateway:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gwctl serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the gateway was not ready within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def replicas(self, engine: str | None = None) -> list[dict[str, Any]]:
        """The replicas of the one engine, or of the engine named `engine`."""
        response = self.admin.get("/admin/api/engines")
        response.raise_for_status()
        engines = response.json()["data"]
        (found,) = engines if engine is None else [e for e in engines if e["name"] == engine]
        return list(found["replicas"])

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=60, **kwargs)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=60, **kwargs)

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def close(self) -> None:
        self.admin.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway with one replica, shared by the tests that do not break it."""
    gw = Gateway(tmp_path_factory.mktemp("engine-gateway"))
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


@pytest.fixture(scope="session")
def client(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with gateway.client() as c:
        yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name in ("gateway", "gw"):
            gw = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(gw, Gateway):
                report.sections.append((f"{name} log (tail)", gw.log()))
