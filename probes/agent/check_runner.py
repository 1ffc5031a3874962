"""Runs a task's checks against a solution inside the sandbox (standard library only; copied into
the scratch dir and run as `python -I -S _runner.py SOLUTION_MODULE`).

Its stdin is a nonce line, then the checks' source, read to the end before anything of the
solution's is imported: the checks are never a file in the sandbox and never a module in
`sys.modules`, and they are compiled only after the solution's import has run, into a module object
of their own, so the solution cannot read, replace or patch them beforehand; a line the solution
prints cannot pass for a result without the nonce. A checks module defines `smoke(m)`,
`behaviour_*(m)` and `test_*(m)`, each taking the imported solution module, run in definition order
with a time limit each. Each result is printed as soon as it is known
(`<nonce> <kind> <ok 0|1> <seconds> <name as hex> <error as hex or ->`, see `parse_line`), so a run
killed half way still reports what it got to.

The checks run in the solution's process, so it is hardened against the solution's code: the
runner's own state is bound before the import; the checks get private copies of the builtins and of
the modules they import; an audit hook refuses frames, heap walks, ctypes, the signal module (a
handler gets the interrupted frame) and /proc; the checks hand the solution no Python-level object
of their own (its `__globals__` would be the checks'). Audit hooks are not a security boundary, and
this is not one either: the sandbox around the process is.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import os
import signal
import sys
import time
import types
from collections.abc import Callable

CHECK_SECONDS = 5.0
KINDS = (("smoke", "smoke"), ("behaviour_", "behaviour"), ("test_", "test"))
# Ways to reach the runner's frames (and so its nonce) or raw memory from the solution's code.
REFUSED_EVENTS = frozenset({
    "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "ctypes.dlopen", "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata",
    "ctypes.string_at", "ctypes.wstring_at", "ctypes.PyObj_FromPtr", "ctypes.call_function",
})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})


class CheckTimeout(BaseException):
    """Raised by the alarm; a BaseException so `except Exception` in the solution cannot eat it."""


def _introspection_refuser() -> Callable[[str, tuple[object, ...]], None]:
    """An audit hook (it cannot be removed): no frames, no heap walks, no ctypes, no re-import of
    the signal module (a handler gets the interrupted frame), no /proc. It
    raises ValueError, which the standard library's own optional uses of frames already expect.
    What it reads is bound now, so patching this module's globals later does not switch it off."""
    refused, frame_attributes, str_, value_error = REFUSED_EVENTS, FRAME_ATTRIBUTES, str, ValueError

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in refused or (event == "object.__getattr__" and args[1] in frame_attributes) or (
            event == "import" and str_(args[0]).split(".")[0] in ("ctypes", "_ctypes", "signal", "_signal")
        ) or (event == "open" and str_(args[0]).startswith("/proc")):
            raise value_error(f"refused in the grading sandbox: {event}")

    return hook


def _private_modules(checks_source: str) -> dict[str, types.ModuleType]:
    """Fresh copies of the modules the checks import, made before the solution runs and kept out of
    `sys.modules`, so a solution that patches `random` or `collections` does not patch the checks'."""
    names: set[str] = set()
    for node in ast.parse(checks_source).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    private = {}
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ImportError(f"the checks import {name!r}, which is not there")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        private[name] = module
    return private


def parse_line(line: str, nonce: str) -> tuple[str, str, bool, str | None, float] | None:
    """(name, kind, ok, error, seconds) from one of the runner's result lines, None for other output."""
    fields = line.split(" ")
    if len(fields) != 6 or fields[0] != nonce:
        return None
    try:
        _, kind, ok, seconds, name, error = fields
        return (bytes.fromhex(name).decode(), kind, ok == "1", None if error == "-" else bytes.fromhex(error).decode(),
                float(seconds))
    except ValueError:
        return None


def main() -> None:
    nonce = sys.stdin.readline().strip()
    checks_source = sys.stdin.read()  # to the end: nothing is left on the pipe for the solution
    sys.stdin.close()
    solution_name = sys.argv[1]
    sys.path.insert(0, os.getcwd())
    # Everything used once the solution's code has run is bound here, before it could patch the
    # builtins, this module's globals or the modules it uses; the checks get a copy of the builtins.
    pristine_builtins = dict(vars(builtins))
    private = _private_modules(checks_source)

    def checks_import(name: str, globals: object = None, locals: object = None, fromlist: object = (),
                      level: int = 0) -> types.ModuleType:
        if level == 0 and name in private:
            return private[name]
        raise ImportError(f"the checks may import only {sorted(private)}")

    pristine_builtins["__import__"] = checks_import
    monotonic, setitimer, itimer_real = time.monotonic, signal.setitimer, signal.ITIMER_REAL
    write, flush = sys.stdout.write, sys.stdout.flush
    compile_, exec_, module_type, import_module = compile, exec, types.ModuleType, importlib.import_module
    type_, str_, list_, vars_, callable_, next_ = type, str, list, vars, callable, next
    kinds, check_seconds, check_timeout = KINDS, CHECK_SECONDS, CheckTimeout

    def on_alarm(signum: int, frame: object) -> None:
        raise check_timeout(f"took longer than {check_seconds:g} s")

    def describe(exc: BaseException) -> str:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return f"{type_(exc).__name__}: {str_(exc)}"[:400] + (f" (line {tb.tb_lineno})" if tb is not None else "")

    def timed(fn: object, *args: object) -> tuple[bool, str | None, float]:
        started = monotonic()
        setitimer(itimer_real, check_seconds)
        try:
            fn(*args)  # type: ignore[operator]
            return True, None, monotonic() - started
        except BaseException as exc:  # noqa: BLE001 - a failing check is data, whatever it raised
            try:
                return False, describe(exc), monotonic() - started
            except BaseException:  # noqa: BLE001 - an exception whose str() raises
                return False, type_(exc).__name__, monotonic() - started
        finally:
            setitimer(itimer_real, 0)

    def emit(name: str, kind: str, ok: bool, error: str | None, seconds: float) -> None:
        # Formatted by built-in types' own methods only: no Python-level encoder the solution could patch.
        write(f"{nonce} {kind} {ok:d} {seconds:.4f} {name.encode().hex()} {error.encode().hex() if error else '-'}\n")
        flush()

    signal.signal(signal.SIGALRM, on_alarm)
    # A signal handler is called with the interrupted frame, and no audit event says so: the
    # solution gets no way to set one (the alarm above is the runner's, taken before).
    # Every other built-in module is loaded now, and the way to create one is then removed: the
    # import system would otherwise make a fresh `_signal` for `importlib.import_module`.
    for name in sys.builtin_module_names:
        if name != "_signal":
            import_module(name)
    for name in ("signal", "_signal"):
        sys.modules.pop(name, None)
    globals().pop("signal", None)
    del sys.modules["_imp"].create_builtin
    sys.addaudithook(_introspection_refuser())
    holder: dict[str, object] = {}
    ok, error, seconds = timed(lambda: holder.update(module=import_module(solution_name)))
    emit("import", "import", ok, error, seconds)
    if not ok:
        return
    checks = module_type("hidden_checks")
    namespace = vars_(checks)
    namespace["__builtins__"] = pristine_builtins
    exec_(compile_(checks_source, "<checks>", "exec"), namespace)
    for name, fn in list_(namespace.items()):
        kind = next_((k for prefix, k in kinds if name.startswith(prefix)), None)
        if kind is None or not callable_(fn):
            continue
        ok, error, seconds = timed(fn, holder["module"])
        emit(name.removeprefix("behaviour_"), kind, ok, error, seconds)
    emit("done", "done", True, None, 0.0)


if __name__ == "__main__":
    main()
