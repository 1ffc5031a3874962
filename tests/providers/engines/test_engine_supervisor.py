"""Supervisor behaviour against a stand-in engine (fake_engine.py): fast, no model needed."""

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from providers.engines import EngineKind, EngineStartError, EngineSupervisor
from providers.engines.commands import parse_llamacpp_line
from providers.engines.config import EngineConfig
from providers.engines.load import EngineLoad, read_load

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def fake_kinds(
    mode: str, flag: Path | None = None, python_module: str | None = None, **kind: Any
) -> Mapping[str, EngineKind]:
    def build(cfg: EngineConfig, *, port: int, model: str, cpu_count: int) -> list[str]:
        return [sys.executable, str(FAKE_ENGINE), str(port), mode, *([str(flag)] if flag else [])]

    return {"llamacpp": EngineKind(build, python_module or "", "/health", **kind)}


def config(**overrides: object) -> EngineConfig:
    # The fake needs no model, but llama.cpp kinds resolve one: any existing file will do.
    fields: dict[str, object] = {"model": str(FAKE_ENGINE), "restart_backoff_initial": 0.05, "ready_timeout": 10}
    return EngineConfig(**(fields | overrides))


def supervisor(cfg: EngineConfig, kinds: Mapping[str, EngineKind], **kwargs: object) -> EngineSupervisor:
    options: dict[str, object] = {"health_interval": 0.05, "health_timeout": 1.0, "stop_grace": 2.0}
    return EngineSupervisor(cfg, kinds=kinds, **(options | kwargs))  # type: ignore[arg-type]


def running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


def test_replicas_and_ports_are_known_at_construction() -> None:
    fixed = EngineSupervisor(config(replicas=2, base_port=18600))
    assert [(r.index, r.port, r.base_url) for r in fixed.replicas] == [
        (0, 18600, "http://127.0.0.1:18600/v1"),
        (1, 18601, "http://127.0.0.1:18601/v1"),
    ]
    assert all(r.state == "starting" and r.model == "smollm2-135m-instruct" for r in fixed.replicas)
    picked = EngineSupervisor(config(replicas=3))
    assert len({r.port for r in picked.replicas}) == 3 and all(r.port > 0 for r in picked.replicas)


def test_ports_beyond_65535_are_refused() -> None:
    with pytest.raises(EngineStartError, match="exceeds 65535"):
        EngineSupervisor(config(replicas=2, base_port=65535))


async def test_start_waits_for_every_replica_and_stop_leaves_no_process(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    sup = supervisor(config(replicas=2), fake_kinds("serve"))
    await sup.start()
    assert [sup.is_ready(i) for i in range(2)] == [True, True]
    pids = [r.pid for r in sup.replicas]
    assert all(pid is not None and running(pid) for pid in pids)
    assert "[engine local#1] fake engine listening on" in caplog.text
    await sup.stop()
    await sup.stop()  # idempotent
    assert not any(running(pid) for pid in pids if pid)
    assert [r.state for r in sup.replicas] == ["stopped", "stopped"]


async def test_a_replica_that_exits_early_fails_start_with_its_last_error_line() -> None:
    sup = supervisor(config(), fake_kinds("crash"))
    started = time.monotonic()
    with pytest.raises(EngineStartError) as info:
        await sup.start()
    assert time.monotonic() - started < 5
    assert str(info.value) == (
        "engine local replica 0 exited with code 3 before it was ready:"
        " RuntimeError: fake engine failed to load the model"
    )
    assert sup.replicas[0].state == "stopped"


async def test_a_replica_that_never_answers_fails_start_after_ready_timeout() -> None:
    sup = supervisor(config(ready_timeout=0.5), fake_kinds("silent"))
    with pytest.raises(EngineStartError, match=r"^engine local replica 0 was not ready within 0.5s$"):
        await sup.start()
    assert sup.replicas[0].pid is not None and not running(sup.replicas[0].pid)


async def test_a_busy_port_is_refused_before_anything_is_spawned() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sup = supervisor(config(base_port=port), fake_kinds("serve"))
        with pytest.raises(EngineStartError) as info:
            await sup.start()
    assert str(info.value) == f"engine local: port {port} is already in use"
    assert sup.replicas[0].pid is None


async def test_a_missing_engine_module_or_command_fails_fast() -> None:
    with pytest.raises(EngineStartError, match="Python module no_such_engine_xyz is not installed"):
        await supervisor(config(), fake_kinds("serve", python_module="no_such_engine_xyz")).start()
    missing = {"llamacpp": EngineKind(lambda cfg, **_: ["/nonexistent/engine"], None, "/health")}
    with pytest.raises(EngineStartError, match="^engine local: cannot run /nonexistent/engine: No such file"):
        await supervisor(config(), missing).start()


async def test_a_bad_model_path_fails_before_spawning(tmp_path: Path) -> None:
    sup = supervisor(config(model=str(tmp_path / "x.gguf")), fake_kinds("serve"))
    with pytest.raises(EngineStartError, match=r"^engine local: model file .*x.gguf not found$"):
        await sup.start()
    assert sup.replicas[0].pid is None


async def test_a_killed_replica_is_restarted() -> None:
    sup = supervisor(config(replicas=2), fake_kinds("serve"))
    await sup.start()
    try:
        victim, other = sup.replicas
        old_pid, other_pid = victim.pid, other.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        await eventually(lambda: victim.state != "ready")
        await eventually(lambda: victim.state == "ready")
        assert victim.restarts == 1 and victim.pid != old_pid and victim.pid is not None and running(victim.pid)
        assert other.pid == other_pid and other.restarts == 0
    finally:
        await sup.stop()


async def test_a_replica_that_stops_answering_is_restarted(tmp_path: Path) -> None:
    sick = tmp_path / "sick"
    sup = supervisor(config(), fake_kinds("flaky", sick), unhealthy_after=2)
    await sup.start()
    try:
        first_pid = sup.replicas[0].pid
        sick.touch()
        await eventually(lambda: sup.replicas[0].state == "restarting")
        sick.unlink()
        await eventually(lambda: sup.is_ready(0))
        assert sup.replicas[0].pid != first_pid and sup.replicas[0].restarts >= 1
    finally:
        await sup.stop()


def fake_start_s() -> float:
    """How long the fake engine takes here from spawn to its first answer (a loaded CI machine
    once took more than a fixed 0.2 s: the first start failed before the test began)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    began = time.monotonic()
    engine = subprocess.Popen([sys.executable, str(FAKE_ENGINE), str(port), "serve"], stdout=subprocess.DEVNULL)
    try:
        while not _answers(port):
            assert engine.poll() is None and time.monotonic() - began < 60, "the fake engine did not start"
            time.sleep(0.01)
        return time.monotonic() - began
    finally:
        engine.kill()
        engine.wait()


async def test_failed_restarts_back_off_exponentially(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sick = tmp_path / "sick"
    # Each failed restart waits ready_timeout: short keeps the test short, above the start time here.
    ready_timeout = max(0.2, 5 * await asyncio.to_thread(fake_start_s))
    cfg = config(ready_timeout=ready_timeout, restart_backoff_initial=0.05, restart_backoff_max=0.2)
    sup = supervisor(cfg, fake_kinds("flaky", sick), unhealthy_after=1)
    await sup.start()
    try:
        sick.touch()
        await eventually(lambda: sup.replicas[0].restarts >= 4, timeout=10 + 5 * ready_timeout)
        delays = [r.getMessage().rsplit(" ", 1)[1] for r in caplog.records if "restarting in" in r.getMessage()]
        assert delays[:4] == ["0.05s", "0.1s", "0.2s", "0.2s"]  # doubling, capped at restart_backoff_max
        assert sup.replicas[0].state == "restarting"
    finally:
        await sup.stop()


async def test_an_external_engine_is_only_probed() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    engine = subprocess.Popen([sys.executable, str(FAKE_ENGINE), str(free), "serve"], stdout=subprocess.DEVNULL)
    try:
        sup = supervisor(EngineConfig(kind="external", url=f"http://127.0.0.1:{free}/v1/"), {})
        await eventually(lambda: _answers(free))
        await sup.start()
        replica = sup.replicas[0]
        assert (replica.base_url, replica.port, replica.pid, replica.state) == (f"http://127.0.0.1:{free}/v1", free, None, "ready")
        engine.kill()
        engine.wait()
        await eventually(lambda: replica.state == "failed")
        await sup.stop()
        assert replica.state == "stopped"
    finally:
        engine.kill()
        engine.wait()


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_engine_dies_with_a_sigkilled_parent(loop: str) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    script = f"""
import asyncio, sys
from pathlib import Path
from gateway.config import EngineConfig
from providers.engines import EngineKind, EngineSupervisor

def build(cfg, *, port, model, cpu_count):
    return [sys.executable, {str(FAKE_ENGINE)!r}, str(port), "serve"]

async def main():
    sup = EngineSupervisor(EngineConfig(model={str(FAKE_ENGINE)!r}), kinds={{"llamacpp": EngineKind(build, None, "/health")}})
    await sup.start()
    print(sup.replicas[0].pid, flush=True)
    await asyncio.sleep(3600)

if {loop!r} == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=FAKE_ENGINE.parents[3], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        engine_pid = int(parent.stdout.readline())
        assert running(engine_pid) and os.getpgid(engine_pid) == engine_pid
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout:
            parent.stdout.close()
    deadline = time.monotonic() + 5
    while running(engine_pid):
        assert time.monotonic() < deadline, f"engine {engine_pid} outlived its SIGKILLed parent"
        time.sleep(0.02)


async def test_a_replica_reports_its_load_while_it_answers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    flag = tmp_path / "junk"
    sup = supervisor(config(), fake_kinds("serve", flag, read_load=read_load), load_interval=0.05)
    await sup.start()
    try:
        await eventually(lambda: sup.load(0) is not None)
        load = sup.load(0)
        assert isinstance(load, EngineLoad)
        assert (load.processing, load.deferred, load.slots, load.kv_usage) == (1, 1, 2, 0.25)
        # An answer that does not parse: the load is unknown, the replica stays up, one warning.
        flag.write_text("junk")
        await eventually(lambda: sup.load(0) is None)
        await asyncio.sleep(0.3)
        assert sup.is_ready(0) and sup.replicas[0].restarts == 0
        warnings = [r.getMessage() for r in caplog.records if "cannot read its load" in r.getMessage()]
        assert len(warnings) == 1 and "/metrics" in warnings[0]
        flag.unlink()
        await eventually(lambda: sup.load(0) is not None)
    finally:
        await sup.stop()
    assert sup.load(0) is None  # stopped: no report is fresh


async def test_engine_output_is_logged_at_the_level_the_parser_gives(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sup = supervisor(config(), fake_kinds("serve", parse_output=parse_llamacpp_line))
    await sup.start()
    await sup.stop()
    lines = [r for r in caplog.records if "fake engine listening" in r.getMessage()]
    assert lines and all(r.levelno == logging.DEBUG for r in lines)
    (warning,) = [r for r in caplog.records if "fake engine warning" in r.getMessage()]
    assert warning.levelno == logging.WARNING and warning.getMessage() == "[engine local#0] fake engine warning"
