"""`gwctl serve` that cannot start: a bad model path or a port in use is one line on stderr, a
non-zero exit within a few seconds, and no engine process left behind."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.engine.conftest import REPO_ROOT, child_env, engine_processes, free_port, gateway_config, gwctl

pytestmark = pytest.mark.engine

FAST_S = 10.0  # measured: about 1.5 s, nearly all of it Python imports


def serve(tmp: Path, config: dict[str, object]) -> tuple[int, str, str, float]:
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    done = subprocess.run(
        gwctl("serve", "-c", str(path)), cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_bad_model_path(tmp_path: Path) -> None:
    config = gateway_config(free_port(), model=str(tmp_path / "missing" / "model.gguf"))

    code, out, err, took = serve(tmp_path, config)

    assert code != 0 and took < FAST_S and out == ""
    assert err.splitlines() == [f"gwctl: engine local: model file {tmp_path / 'missing' / 'model.gguf'} not found"]


def test_an_engine_port_in_use(tmp_path: Path, busy_port: int) -> None:
    code, out, err, took = serve(tmp_path, gateway_config(free_port(), base_port=busy_port))

    assert code != 0 and took < FAST_S and out == ""
    assert err.splitlines() == [f"gwctl: engine local: port {busy_port} is already in use"]
    assert engine_processes(busy_port) == []


def test_the_gateway_port_in_use(tmp_path: Path, busy_port: int) -> None:
    engine_port = free_port()
    code, out, err, took = serve(tmp_path, gateway_config(busy_port, base_port=engine_port))

    assert code != 0 and took < FAST_S and out == ""
    assert err.splitlines() == [f"gwctl: server port {busy_port} on 127.0.0.1 is already in use"]
    assert engine_processes(engine_port) == []  # checked before any engine was started
