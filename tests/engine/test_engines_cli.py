"""`gwctl engines` against the running gateway: each replica with state, pid, port, model, uptime, restarts."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.engine.conftest import ADMIN_KEY, MODEL, REPO_ROOT, Gateway, child_env, engine_processes, gwctl

pytestmark = pytest.mark.engine


def run_gwctl(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gwctl(*args), cwd=REPO_ROOT, env=child_env(**env), capture_output=True, text=True, timeout=30)


def test_gwctl_engines_prints_the_replicas(gateway: Gateway) -> None:
    (replica,) = gateway.replicas()

    done = run_gwctl("engines", "--url", gateway.url, "--admin-key", ADMIN_KEY)

    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.strip().splitlines()
    assert header.split() == ["ENGINE", "REPLICA", "STATE", "PID", "PORT", "MODEL", "UPTIME", "RESTARTS"]
    (row,) = rows
    engine, index, state, pid, port, model, uptime, restarts = row.split()
    assert (engine, index, state, model, restarts) == ("local", "0", "ready", MODEL, "0")
    assert int(pid) == replica["pid"] and int(port) == replica["port"]
    assert re.fullmatch(r"\d+s", uptime)
    # The pid and port are the real engine's: that process serves on that port.
    assert engine_processes(int(port)) == [int(pid)]


def test_gwctl_engines_json_from_the_environment(gateway: Gateway) -> None:
    done = run_gwctl("engines", "--json", GW_URL=gateway.url, GW_ADMIN_KEY=ADMIN_KEY)

    assert done.returncode == 0, done.stderr
    (engine,) = json.loads(done.stdout)
    assert (engine["name"], engine["kind"], engine["model"]) == ("local", "llamacpp", "smollm2")
    (replica,) = engine["replicas"]
    assert replica["state"] == "ready" and replica["restarts"] == 0 and replica["uptime_s"] >= 0
    assert replica["base_url"] == f"http://127.0.0.1:{replica['port']}/v1"


def test_gwctl_engines_without_the_admin_key_is_one_line(gateway: Gateway) -> None:
    done = run_gwctl("engines", "--url", gateway.url)

    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gwctl: /admin/api/engines: 401")
