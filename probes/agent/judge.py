"""Runs a task's checks against a solution that runs in another process (standard library only;
copied into a sandbox of its own and run as `python -I -S _judge.py FD`).

Its stdin is a nonce line, then the checks' source. A checks module defines `smoke(m)`,
`behaviour_*(m)` and `test_*(m)`, run in definition order with a time limit each. `m` is a proxy
for the solution's module: each attribute read, call, `len`, `in`, `bool` or iteration on it (or on
an object it returns) is a request to the solution's driver (`probes.agent.driver`) on the socket
FD, and the answer comes back as plain values (None, bool, int, float, str, list, tuple, dict, set,
bytes) or as a proxy for an object that stays in the solution's process. The judge never runs the
solution's code: `==`, `<`, `hash` and `str` of a proxy are the proxy's own (identity), so an
object that claims to equal anything stays unequal to every expected value. Answers are parsed with
limits (line length, nesting depth, only the tags above) and never unpickled; a malformed or late
answer ends the link, and every check after it fails.

Each result is printed as soon as it is known (`<nonce> <kind> <ok 0|1> <seconds> <name as hex>
<error as hex or ->`, see `parse_line`), so a run killed half way still reports what it got to.
The solution cannot reach this process: not its memory, its stdout or its checks.
"""

from __future__ import annotations

import builtins
import json
import signal
import socket
import sys
import time
import types
from collections.abc import Callable

CHECK_SECONDS = 5.0
GRACE_SECONDS = 1.0  # how much longer than its budget an answer may take before the link is given up
KINDS = (("smoke", "smoke"), ("behaviour_", "behaviour"), ("test_", "test"))
MAX_LINE = 1 << 20
MAX_DEPTH = 64
MAX_NAME = 100
MAX_MESSAGE = 400
# The solution's exceptions are raised here as these built-in types (the first of its built-in
# bases the driver names), with its message; any other as SolutionError.
EXCEPTIONS = {cls.__name__: cls for cls in (
    ValueError, TypeError, KeyError, IndexError, LookupError, ZeroDivisionError, ArithmeticError,
    OverflowError, AttributeError, NotImplementedError, RuntimeError, RecursionError, AssertionError,
    MemoryError, NameError, Exception,
)}


class CheckTimeout(BaseException):
    """A check ran past its time; a BaseException so that the checks' `except Exception` lets it through."""


class SolutionGone(Exception):
    """The solution's process stopped answering, or answered out of turn; the link is closed."""


class SolutionError(Exception):
    """The solution raised an exception that is not one of the built-in types in EXCEPTIONS."""


class Link:
    """Request and answer, one JSON line each, over the socket to the solution's driver."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self._next_id = 0
        self.dead: str | None = None
        self.deadline = 0.0  # of the check now running (time.monotonic)
        # (handle, attribute) -> the callable it held when read: `m.f(x)` in a loop is one request
        # per call. The solution's own rebinding of a method it was asked for is not seen.
        self.callables: dict[tuple[int, str], Remote] = {}

    def request(self, op: str, **fields: object) -> object:
        if self.dead is not None:
            raise SolutionGone(self.dead)
        budget = self.deadline - time.monotonic()
        if budget <= 0:
            raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s")
        self._next_id += 1
        message = {"id": self._next_id, "op": op, "budget": budget, **fields}
        try:
            self._sock.settimeout(budget + GRACE_SECONDS)  # a solution that stops reading cannot stall the send
            self._sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            reply = self._read(budget + GRACE_SECONDS)
        except CheckTimeout:
            self.dead = "the solution did not answer in time"
            raise
        except (OSError, ValueError, RecursionError, SolutionGone) as exc:
            self.dead = f"the solution stopped answering ({type(exc).__name__}: {str(exc)[:200]})"
            raise SolutionGone(self.dead) from None
        except BaseException:
            self.dead = "the link was interrupted"
            raise
        return self._answer(reply)

    def _read(self, seconds: float) -> dict:
        until = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                raise ValueError(f"an answer longer than {MAX_LINE} bytes")
            left = until - time.monotonic()
            if left <= 0:
                raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s (no answer)")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s (no answer)") from None
            if not chunk:
                raise SolutionGone("its process ended")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        if len(line) > MAX_LINE:
            raise ValueError(f"an answer longer than {MAX_LINE} bytes")
        reply = json.loads(line)
        if type(reply) is not dict or reply.get("id") != self._next_id:
            raise ValueError("an answer out of turn")
        return reply

    def _answer(self, reply: dict) -> object:
        if "ok" in reply:
            try:
                return decode(reply["ok"], self)
            except (ValueError, TypeError, RecursionError) as exc:
                self.dead = f"the solution answered with a malformed value ({str(exc)[:200]})"
                raise SolutionGone(self.dead) from None
        if reply.get("timeout") is True:
            raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s")
        info = reply.get("raised")
        if type(info) is not dict:
            self.dead = "the solution answered with neither a value nor an exception"
            raise SolutionGone(self.dead)
        raise solution_exception(info)


def _text(value: object, cap: int) -> str:
    return value[:cap] if type(value) is str else ""


def solution_exception(info: dict) -> Exception:
    """The exception to raise for one the solution raised: a built-in type it derives from, or SolutionError."""
    message = _text(info.get("message"), MAX_MESSAGE)
    names = info.get("types")
    for name in names if type(names) is list else []:
        if type(name) is str and name in EXCEPTIONS:
            return EXCEPTIONS[name](message)
    return SolutionError(f"{_text(info.get('name'), MAX_NAME)}: {message}")


def decode(value: object, link: Link, depth: int = 0) -> object:
    """A value from the solution: only JSON's own types and the driver's tags; objects become proxies."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth >= MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} deep")
    if type(value) is list:
        return [decode(v, link, depth + 1) for v in value]
    if type(value) is not dict or not value:
        raise ValueError("not a value")
    if "h" in value:
        number, kind = value["h"], value.get("c")
        if type(number) is not int or set(value) - {"h", "c", "m"}:
            raise ValueError("a malformed handle")
        return Remote(link, number, _text(kind, MAX_NAME), value.get("m") == 1)
    if len(value) != 1:
        raise ValueError("a malformed tag")
    ((tag, inner),) = value.items()
    if tag == "b" and type(inner) is str:
        return bytes.fromhex(inner)
    if type(inner) is not list:
        raise ValueError("a malformed tag")
    items = [decode(v, link, depth + 1) for v in inner]
    if tag == "t":
        return tuple(items)
    if tag == "d":
        if not all(type(i) is list and len(i) == 2 for i in items):
            raise ValueError("a malformed dict")
        return {k: v for k, v in items}  # TypeError for an unhashable key
    if tag == "s":
        return set(items)
    if tag == "f":
        return frozenset(items)
    raise ValueError(f"an unknown tag {tag[:20]!r}")


def encode(value: object, depth: int = 0) -> object:
    """An argument for the solution: plain values, and proxies as their handles."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth >= MAX_DEPTH:
        raise ValueError(f"an argument nested more than {MAX_DEPTH} deep")
    if type(value) is Remote:
        return {"h": object.__getattribute__(value, "_gw_number")}
    if type(value) is list:
        return [encode(v, depth + 1) for v in value]
    if type(value) is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if type(value) is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if type(value) in (set, frozenset):
        return {"f" if type(value) is frozenset else "s": [encode(v, depth + 1) for v in value]}
    raise TypeError(f"a {type(value).__name__} cannot be passed to the solution: only plain values and its own objects")


class Remote:
    """An object in the solution's process. Reading, setting and calling it ask the driver; comparing,
    hashing and printing it do not (they are this proxy's own)."""

    __slots__ = ("_gw_link", "_gw_number", "_gw_kind", "_gw_callable")

    def __init__(self, link: Link, number: int, kind: str, is_callable: bool = False) -> None:
        object.__setattr__(self, "_gw_link", link)
        object.__setattr__(self, "_gw_number", number)
        object.__setattr__(self, "_gw_kind", kind)
        object.__setattr__(self, "_gw_callable", is_callable)

    def _gw(self, op: str, **fields: object) -> object:
        return object.__getattribute__(self, "_gw_link").request(
            op, obj=object.__getattribute__(self, "_gw_number"), **fields)

    def __getattr__(self, name: str) -> object:
        key = (object.__getattribute__(self, "_gw_number"), name)
        callables = object.__getattribute__(self, "_gw_link").callables
        if (known := callables.get(key)) is not None:
            return known
        value = self._gw("get", name=name)
        if type(value) is Remote and object.__getattribute__(value, "_gw_callable"):
            callables[key] = value
        return value

    def __setattr__(self, name: str, value: object) -> None:
        object.__getattribute__(self, "_gw_link").callables.pop((object.__getattribute__(self, "_gw_number"), name),
                                                                None)
        self._gw("set", name=name, value=encode(value))

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._gw("call", args=[encode(a) for a in args], kwargs={k: encode(v) for k, v in kwargs.items()})

    def __len__(self) -> int:
        n = self._gw("len")
        if type(n) is not int:
            raise TypeError("len() of the solution's object is not an int")
        return n

    def __contains__(self, value: object) -> bool:
        return self._gw("contains", value=encode(value)) is True

    def __bool__(self) -> bool:
        return self._gw("bool") is True

    def __iter__(self):  # noqa: ANN204
        items = self._gw("list")
        if type(items) is not list:
            raise TypeError("the solution's object did not list as a list")
        return iter(items)

    def __getitem__(self, key: object) -> object:
        return self._gw("getitem", key=encode(key))

    def __repr__(self) -> str:
        return f"<{object.__getattribute__(self, '_gw_kind')} object of the solution>"


class Driver:
    """What the checks may ask of the solution's process besides reading and calling `m`:

    - `driver.clock(now)` makes a clock there: (a namespace whose `.now` the check moves, a
      callable that reads it, a callable that sets it);
    - `driver.calls([(fn, args), ...])` makes many calls in one request, in order, and returns their
      results (the first exception ends them and is raised here), for checks that call thousands of times.
    """

    def __init__(self, link: Link) -> None:
        self._link = link

    def clock(self, now: float = 100.0) -> tuple[object, object, object]:
        state, read, set_to = self._link.request("clock", now=float(now))  # type: ignore[misc]
        return state, read, set_to

    def calls(self, calls: list[tuple[object, tuple[object, ...]]]) -> list[object]:
        wire = []
        for fn, args in calls:
            if type(fn) is not Remote:
                raise TypeError("driver.calls takes the solution's own callables")
            wire.append([object.__getattribute__(fn, "_gw_number"), [encode(a) for a in args]])
        results = self._link.request("calls", calls=wire)
        if type(results) is not list or len(results) != len(calls):
            raise SolutionGone("the solution answered a batch of calls with something else")
        return results


def parse_line(line: str, nonce: str) -> tuple[str, str, bool, str | None, float] | None:
    """(name, kind, ok, error, seconds) from one of the judge's result lines, None for other output."""
    fields = line.split(" ")
    if len(fields) != 6 or fields[0] != nonce:
        return None
    try:
        _, kind, ok, seconds, name, error = fields
        return (bytes.fromhex(name).decode(), kind, ok == "1", None if error == "-" else bytes.fromhex(error).decode(),
                float(seconds))
    except ValueError:
        return None


def describe(exc: BaseException) -> str:
    """The exception and the innermost line of the checks it passed through."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<checks>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{type(exc).__name__}: {exc}"[:400] + (f" (line {line})" if line is not None else "")


def main() -> None:
    nonce = sys.stdin.readline().strip()
    checks_source = sys.stdin.read()
    link = Link(socket.socket(fileno=int(sys.argv[1])))

    def on_alarm(signum: int, frame: object) -> None:
        raise CheckTimeout(f"took longer than {CHECK_SECONDS:g} s")

    # A backstop for the checks' own work; waiting on the solution is bounded by the link.
    signal.signal(signal.SIGALRM, on_alarm)

    def timed(fn: Callable[..., object], *args: object) -> tuple[bool, str | None, float]:
        started = time.monotonic()
        link.deadline = started + CHECK_SECONDS
        signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS + 2 * GRACE_SECONDS)
        try:
            fn(*args)
            return True, None, time.monotonic() - started
        except BaseException as exc:  # noqa: BLE001 - a failing check is data, whatever it raised
            return False, describe(exc), time.monotonic() - started
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def emit(name: str, kind: str, ok: bool, error: str | None, seconds: float) -> None:
        sys.stdout.write(f"{nonce} {kind} {ok:d} {seconds:.4f} {name.encode().hex()} "
                         f"{error.encode().hex() if error else '-'}\n")
        sys.stdout.flush()

    holder: dict[str, object] = {}
    ok, error, seconds = timed(lambda: holder.update(module=link.request("import")))
    if ok and type(holder["module"]) is not Remote:
        ok, error = False, "SolutionGone: the driver did not hand over a module"
    emit("import", "import", ok, error, seconds)
    if not ok:
        return
    checks = types.ModuleType("hidden_checks")
    namespace = vars(checks)
    namespace["__builtins__"] = builtins
    namespace["driver"] = Driver(link)
    exec(compile(checks_source, "<checks>", "exec"), namespace)
    for name, fn in list(namespace.items()):
        kind = next((k for prefix, k in KINDS if name.startswith(prefix)), None)
        if kind is None or not callable(fn):
            continue
        ok, error, seconds = timed(fn, holder["module"])
        emit(name.removeprefix("behaviour_"), kind, ok, error, seconds)
    emit("done", "done", True, None, 0.0)


if __name__ == "__main__":
    main()
