"""The harness and the CLI start real server processes and leave none behind."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli.gwctl import main as gwctl
from gateway.config import load_config
from probes.testbed.cli import READY_COMMENT
from probes.testbed.harness import EndpointSpec, Testbed, TestbedError

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_stop_leaves_no_processes() -> None:
    with Testbed([EndpointSpec("a"), EndpointSpec("b", process=1)]) as tb:
        pids = tb.pids
        assert len(pids) == 2 and all(alive(p) for p in pids)
        assert httpx.get(f"{tb.base_url('b')}/models").json()["data"][0]["id"] == "smollm2"
        assert tb.base_url("a").endswith("/a/v1") and tb.base_url("a") != tb.base_url("b").replace("/b/", "/a/")
    assert wait_gone(pids, 0.0) == []
    with pytest.raises(TestbedError, match="not running"):
        tb.base_url("a")


def test_a_server_that_cannot_start_is_one_error_with_its_stderr() -> None:
    tb = Testbed([EndpointSpec("a", model="no-such-model")], startup_timeout=60)
    with pytest.raises(TestbedError, match="exited with 2.*unknown model 'no-such-model'"):
        tb.start()
    assert tb.pids == []


def test_servers_exit_when_the_parent_dies(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from probes.testbed.harness import Testbed, EndpointSpec\n"
        "tb = Testbed([EndpointSpec('a')]).start()\n"
        "print(*tb.pids, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids and all(alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
    assert wait_gone(pids) == []


def test_cli_rejects_a_bad_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("endpoints:\n  - {name: a, fault: {logit_noise: -2}}\n")
    assert gwctl(["testbed", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fault.logit_noise" in err
    assert gwctl(["testbed", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_prints_a_gateway_config_and_stops_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "testbed.yaml"
    config.write_text(yaml.safe_dump({"endpoints": [{"name": "honest"}, {"name": "cooled", "fault": {"temperature": 0.7}}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "probes.testbed", "--config", str(config), "--print-gateway-config"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while (line := proc.stdout.readline()) and not line.startswith(READY_COMMENT):
            lines.append(line)
        snippet = tmp_path / "gw.yaml"
        snippet.write_text("".join(lines))
        settings = load_config(snippet, environ={})
        urls = {d.endpoint_id: p.base_url for d, p in zip(settings.deployments, settings.providers)}
        assert set(urls) == {"testbed/honest", "testbed/cooled"}
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
        assert httpx.post(f"{urls['testbed/cooled']}/chat/completions", json=body, timeout=120).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "cooled" in err and "temperature" in err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{urls['testbed/honest']}/models", timeout=2)
