"""bench/fault_drill.py in its short form (50 req/s, 5 s phases, every fault once: upstream SIGKILL
and return, Redis SIGKILL and restart, PostgreSQL immediate stop and start, SIGKILL of an engine
replica under streams, a rolling restart of both replicas), run as CI runs it: no client error
while a healthy candidate existed, every request sent has exactly one request record."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from providers.engines.commands import llama_server_path
from providers.engines.models import SMOLLM2_PACKAGE
from tests.ops.cluster import PG_BIN, ROOT, nginx_binary
from tests.services import require

CUT_AFTER_COMMIT = "stream cut after commit"


def test_the_short_fault_drill_loses_no_request_and_no_record(tmp_path: Path) -> None:
    require(nginx_binary() is not None, "nginx is not installed (scripts/test.sh installs nginx-light)")
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    require((PG_BIN / "initdb").exists(), f"PostgreSQL's initdb is not in {PG_BIN} (set GW_PG_BIN)")
    require(shutil.which(llama_server_path()) is not None and importlib.util.find_spec(SMOLLM2_PACKAGE) is not None,
            "the bundled engine (llama-server, the shipped SmolLM2) is not installed (scripts/install.sh)")
    out = tmp_path / "drill.json"
    done = subprocess.run(
        [sys.executable, "bench/fault_drill.py", "--short", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=600,  # ~50 s of drill and ~30 s of start-up and shutdown on a quiet 2-core machine
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    print(done.stdout)  # the table, for the CI log
    s = json.loads(out.read_text())
    assert [p["phase"] for p in s["phases"]] == [
        "baseline", "upstream SIGKILL", "Redis SIGKILL", "PostgreSQL immediate stop", "engine SIGKILL",
        "rolling restart", "after",
    ]
    assert all(p["sent"] > 0 for p in s["phases"])
    assert s["sent"] >= 50 * 25  # open loop at 50 req/s for the whole timeline
    # A healthy candidate existed throughout: no client-visible error at all, except a stream
    # whose upstream broke after its first event (committed: it cannot move, it ends with an error event).
    avoidable = [f"{e['cause']} (stream: {e['stream']}): {e['detail']}" for e in s["error_samples"]
                 if e["cause"] != CUT_AFTER_COMMIT]
    assert s["avoidable_errors"] == 0, "\n".join([str(s["errors"]), *avoidable, *s["balancer_errors"]])
    cut = [e for e in s["error_samples"] if e["cause"] == CUT_AFTER_COMMIT]
    assert all(e["stream"] and "stream broke off" in e["detail"] for e in cut), cut
    assert s["answered"] == s["sent"] - s["errors"].get(CUT_AFTER_COMMIT, 0)
    # The faulty upstream did fail requests, and the gateway hid every one it could.
    assert s["injected"].get("status", 0) > 0
    # The engine: streams throughout its phase; its supervisor restarted the killed replica, and
    # what was sent while it was down went to the other one. Only a stream cut on it may fail.
    e = s["engine"]
    assert e["sent"] > 0 and e["restart_s"] > 0, e
    assert e["sent_while_down"] > 0 and e["errors_while_down"] == {}, e
    assert set(e["errors"]) <= {CUT_AFTER_COMMIT}, e
    # Records: one per request sent, none lost across the Redis and PostgreSQL outages and the restarts.
    assert s["answered_without_record"] == 0 and s["duplicates"] == 0
    assert s["records"] == s["sent"]
    assert not s["notes"], s["notes"]  # every replica exited 0 on SIGTERM
