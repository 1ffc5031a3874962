"""The solution's side of grading (standard library only; copied into the solution's sandbox and run
as `python -I -S _driver.py SOLUTION_MODULE FD`).

It decides nothing. It imports the solution and then does what the judge (`probes.agent.judge`, in a
sandbox of its own) asks on the socket FD, one JSON line per request: get or set an attribute, call
(or make many calls in a row), `len`, `in`, `bool`, list or index an object, make a clock. It answers each with one JSON line: the
result as plain values, or the exception's type names and message, or that the call ran out of the
time the judge gave it. Objects that are not plain values stay here and travel as handles
(`{"h": N}`), so the judge can call them again but never runs their code.

Everything in this process, this file included, is the solution's to change: a solution that
patches it only changes its own answers. The checks, and so the expected values, never come here.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import socket
import sys
import types

MAX_DEPTH = 64
MAX_REPLY = 1 << 20  # the judge refuses longer lines
MAX_MESSAGE = 400


class CheckTimeout(BaseException):
    """Raised by the alarm; a BaseException so that `except Exception` in the solution lets it through."""


class Handles:
    """The objects handed to the judge, by number. Each stays referenced, so its id is never reused."""

    def __init__(self, module: object) -> None:
        self._objects: list[object] = [module]
        self._numbers: dict[int, int] = {id(module): 0}

    def number(self, obj: object) -> int:
        n = self._numbers.get(id(obj))
        if n is None:
            n = self._numbers[id(obj)] = len(self._objects)
            self._objects.append(obj)
        return n

    def get(self, n: object) -> object:
        if type(n) is not int or not 0 <= n < len(self._objects):
            raise ValueError(f"no such handle: {n!r}")
        return self._objects[n]


def encode(value: object, handles: Handles, depth: int = 0) -> object:
    """Plain values as JSON (tuples, dicts, sets and bytes tagged), anything else as a handle."""
    if value is None or type(value) in (bool, str):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):  # bool cannot be subclassed: it was handled above
        return int(value)
    if isinstance(value, float):
        return float(value)
    if depth >= MAX_DEPTH:
        raise ValueError(f"a value nested more than {MAX_DEPTH} deep cannot be sent")
    if isinstance(value, list):
        return [encode(v, handles, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"t": [encode(v, handles, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"f" if isinstance(value, frozenset) else "s": [encode(v, handles, depth + 1) for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    handle = {"h": handles.number(value), "c": type(value).__name__[:100]}
    if callable(value):
        handle["m"] = 1  # the judge may reuse it for the same attribute: `m.f(x)` costs one call, not two
    return handle


def decode(value: object, handles: Handles) -> object:
    """A request's argument: plain values, or `{"h": N}` for an object handed out before."""
    if isinstance(value, list):
        return [decode(v, handles) for v in value]
    if isinstance(value, dict):
        ((tag, inner),) = value.items()
        if tag == "h":
            return handles.get(inner)
        items = [decode(v, handles) for v in inner]
        if tag == "t":
            return tuple(items)
        if tag == "d":
            return {k: v for k, v in items}
        if tag == "s":
            return set(items)
        if tag == "f":
            return frozenset(items)
        raise ValueError(f"unknown tag {tag!r}")
    return value


def perform(request: dict, handles: Handles) -> object:
    op = request["op"]
    if op == "clock":
        # A clock for the checks to inject: a namespace they move, a partial of the builtin getattr
        # that reads it, and one of setattr that moves it (for `calls`).
        state = types.SimpleNamespace(now=float(request["now"]))
        return (state, functools.partial(getattr, state, "now"), functools.partial(setattr, state, "now"))
    if op == "calls":
        # Many calls in one request, in order; the first exception ends them.
        return [handles.get(fn)(*decode(args, handles)) for fn, args in request["calls"]]  # type: ignore[operator]
    target = handles.get(request["obj"])
    if op == "get":
        return getattr(target, request["name"])
    if op == "set":
        setattr(target, request["name"], decode(request["value"], handles))
        return None
    if op == "call":
        args = decode(request.get("args", []), handles)
        kwargs = {k: decode(v, handles) for k, v in request.get("kwargs", {}).items()}
        return target(*args, **kwargs)  # type: ignore[operator]
    if op == "len":
        return len(target)  # type: ignore[arg-type]
    if op == "contains":
        return decode(request["value"], handles) in target  # type: ignore[operator]
    if op == "bool":
        return bool(target)
    if op == "list":
        return list(target)  # type: ignore[call-overload]
    if op == "getitem":
        return target[decode(request["key"], handles)]  # type: ignore[index]
    raise ValueError(f"unknown op {op!r}")


def raised(exc: BaseException) -> dict:
    """The exception's built-in type names, most derived first, and its message, capped."""
    builtin = [c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"]
    try:
        message = str(exc)[:MAX_MESSAGE]
    except BaseException:  # noqa: BLE001 - an exception whose str() raises
        message = ""
    return {"types": builtin, "name": type(exc).__name__[:100], "message": message}


def main() -> None:
    module_name, fd = sys.argv[1], int(sys.argv[2])
    link = socket.socket(fileno=fd)
    reader = link.makefile("rb")
    sys.path.insert(0, os.getcwd())
    setitimer, itimer_real = signal.setitimer, signal.ITIMER_REAL

    def on_alarm(signum: int, frame: object) -> None:
        raise CheckTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    handles: Handles | None = None
    for line in reader:
        request = json.loads(line)
        reply: dict = {"id": request.get("id")}
        try:
            setitimer(itimer_real, max(float(request.get("budget", 5.0)), 0.001))
            if request["op"] == "import":
                module = importlib.import_module(module_name)
                handles = Handles(module)
                result = encode(module, handles)
            elif handles is None:
                raise ValueError("the solution was not imported")
            else:
                result = encode(perform(request, handles), handles)
            setitimer(itimer_real, 0)
            reply["ok"] = result
        except CheckTimeout:
            reply["timeout"] = True
        except BaseException as exc:  # noqa: BLE001 - whatever the solution raised is its answer
            reply["raised"] = raised(exc)
        finally:
            setitimer(itimer_real, 0)
        data = json.dumps(reply, separators=(",", ":"))
        if len(data) > MAX_REPLY:
            data = json.dumps({"id": request.get("id"), "raised": {
                "types": ["ValueError"], "name": "ValueError",
                "message": f"the answer is too large to send ({len(data)} bytes)"}})
        link.sendall(data.encode() + b"\n")


if __name__ == "__main__":
    main()
