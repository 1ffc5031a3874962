"""The testbed's server over the scripted honest model (`fakes.ScriptedTestbedService`), as a
process of its own, so a test's gateway shares neither its event loop nor its GIL:

    python -m tests.probes.toolcalls.scripted_testbed '<endpoint specs JSON>' PARENT_PID

Prints the testbed's ready line (`TESTBED READY <base url>`) once it serves; exits with its parent.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from probes.testbed.endpoints import READY_LINE, EndpointSpec
from probes.testbed.server import ServedEndpoints, serve
from probes.toolcalls.cases import load_suite
from tests.probes.toolcalls.fakes import ScriptedTestbedService, expectations_of

ROOT = Path(__file__).resolve().parents[3]


def start(specs: Sequence[EndpointSpec], *, timeout: float = 60.0) -> tuple[subprocess.Popen[str], str]:
    """Start one; returns the process and its root URL (endpoints are at /<name>/v1)."""
    specs_json = json.dumps([s.to_json() for s in specs])
    cmd = [sys.executable, "-m", "tests.probes.toolcalls.scripted_testbed", specs_json, str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            raise RuntimeError("the scripted testbed did not start")
    line = proc.stdout.readline().strip()
    if not line.startswith(READY_LINE):
        proc.kill()
        raise RuntimeError(f"the scripted testbed did not start: {line!r}")
    return proc, line.split()[-1]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def main(argv: list[str]) -> int:
    specs = [EndpointSpec.from_json(raw) for raw in json.loads(argv[1])]
    served = ServedEndpoints(specs, ScriptedTestbedService(expectations_of(load_suite().cases)))  # type: ignore[arg-type]
    return asyncio.run(serve(served, "127.0.0.1", 0, int(argv[2])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
