"""Runs a task's checks against a solution inside the sandbox (standard library only; copied into
the scratch dir and run as `python -I -S _runner.py SOLUTION_MODULE`).

Its stdin is a nonce line, then the checks' source, read to the end before anything of the
solution's is imported: the checks are never a file in the sandbox and never a module in
`sys.modules`, and they are compiled only after the solution's import has run, into a module object
of their own, so the solution cannot read, replace or patch them beforehand; a line the solution
prints cannot pass for a result without the nonce. A checks module defines `smoke(m)`,
`behaviour_*(m)` and `test_*(m)`, each taking the imported solution module, run in definition order
with a time limit each. Each result is printed as soon as it is known (`<nonce> {json}`), so a run
killed half way still reports what it got to.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback
import types

CHECK_SECONDS = 5.0
KINDS = (("smoke", "smoke"), ("behaviour_", "behaviour"), ("test_", "test"))


class CheckTimeout(BaseException):
    """Raised by the alarm; a BaseException so `except Exception` in the solution cannot eat it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s")


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (line {where[0].lineno} in {os.path.basename(where[0].filename)})" if where else ""
    return f"{type(exc).__name__}: {exc}"[:400] + at


def _timed(fn: object, *args: object) -> tuple[bool, str | None, float]:
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS)
    try:
        fn(*args)  # type: ignore[operator]
        return True, None, time.monotonic() - started
    except BaseException as exc:  # noqa: BLE001 - a failing check is data, whatever it raised
        return False, _describe(exc), time.monotonic() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    nonce = sys.stdin.readline().strip()
    checks_source = sys.stdin.read()
    solution_name = sys.argv[1]
    sys.path.insert(0, os.getcwd())
    compile_, exec_ = compile, exec  # taken before the solution could swap the builtins
    signal.signal(signal.SIGALRM, _on_alarm)
    out = sys.stdout

    def emit(record: dict[str, object]) -> None:
        out.write(f"{nonce} {json.dumps(record)}\n")
        out.flush()

    holder: dict[str, object] = {}
    ok, error, seconds = _timed(lambda: holder.update(module=importlib.import_module(solution_name)))
    emit({"name": "import", "kind": "import", "ok": ok, "error": error, "seconds": round(seconds, 4)})
    if not ok:
        return
    checks = types.ModuleType("hidden_checks")
    exec_(compile_(checks_source, "<checks>", "exec"), vars(checks))
    for name, fn in list(vars(checks).items()):
        kind = next((k for prefix, k in KINDS if name.startswith(prefix)), None)
        if kind is None or not callable(fn):
            continue
        ok, error, seconds = _timed(fn, holder["module"])
        emit({"name": name.removeprefix("behaviour_"), "kind": kind, "ok": ok, "error": error,
              "seconds": round(seconds, 4)})
    emit({"name": "done", "kind": "done", "ok": True, "error": None, "seconds": 0})


if __name__ == "__main__":
    main()
