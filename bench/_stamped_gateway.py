"""`gwctl serve` with timestamps at the stage boundaries of the request path (for critical_path.py).

    python bench/_stamped_gateway.py --out stamps.json -- serve -c gateway.yaml

Wraps the stage functions by name before the server starts; each wrapper records
`time.monotonic_ns()` (CLOCK_MONOTONIC, the same clock in every process) when its function
returns, or when it is called for the names in BEFORE. One request at a time is assumed: the
requests of critical_path.py are sequential. At exit, the records (one per inference request,
keyed by the request id) are written to --out. A renamed stage fails here, at start, by name.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import inspect
import json
import sys
from pathlib import Path
from time import monotonic_ns
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (module, attribute path, stamp): the stamp is taken when the function returns.
AFTER = [
    ("gateway.http.openai_routes", "read_body", "body"),
    ("gateway.http.openai_routes", "parse_json", "parsed"),
    ("gateway.http.openai_routes", "validate", "validated"),
    ("gateway.http.openai_routes", "resolve", "resolved"),
    ("gateway.routing.router", "Router.features", "features"),
    ("gateway.routing.router", "Router.decide", "decided"),
    ("gateway.routing.router", "Router.route", "routed"),
    ("providers.http", "AiohttpClient.send", "upstream_headers"),
    ("providers.http", "_AiohttpResponse.read", "upstream_body"),
    ("gateway.pipeline.dispatch", "Dispatcher.dispatch", "dispatched"),
]
# ... and these when the function is called.
BEFORE = [
    ("providers.http", "AiohttpClient.send", "upstream_sent"),
    ("uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol.data_received", "recv"),
]


class Stamps:
    def __init__(self) -> None:
        self.current: dict[str, int] = {}
        self.records: dict[str, dict[str, int]] = {}

    def wrap(self, owner: Any, name: str, label: str, *, before: bool) -> None:
        fn = getattr(owner, name)
        current = self.current
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def stamped(*args: Any, **kwargs: Any) -> Any:
                if before:
                    current[label] = monotonic_ns()
                out = await fn(*args, **kwargs)
                if not before:
                    current[label] = monotonic_ns()
                return out
        else:

            @functools.wraps(fn)
            def stamped(*args: Any, **kwargs: Any) -> Any:
                if before:
                    current[label] = monotonic_ns()
                out = fn(*args, **kwargs)
                if not before:
                    current[label] = monotonic_ns()
                return out

        setattr(owner, name, stamped)

    def wrap_endpoint(self, cls: Any) -> None:
        """The endpoint's entry and return, and its first two ASGI sends (headers, then the
        body or the first stream chunk): `send1` when the first is called, `sent2` when the
        second returns."""
        call = cls.__call__
        current, records = self.current, self.records

        async def stamped(endpoint: Any, scope: Any, receive: Any, send: Any) -> None:
            current["entry"] = monotonic_ns()
            sends = 0

            async def stamped_send(message: Any) -> None:
                nonlocal sends
                sends += 1
                if sends == 1:
                    current["send1"] = monotonic_ns()
                await send(message)
                if sends == 2:
                    current["sent2"] = monotonic_ns()

            try:
                await call(endpoint, scope, receive, stamped_send)
            finally:
                current["end"] = monotonic_ns()
                records[scope["gateway.request_id"]] = dict(current)
                current.clear()

        cls.__call__ = stamped


def resolve_owner(module: str, path: str) -> tuple[Any, str]:
    owner: Any = __import__(module, fromlist=["_"])
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    if not hasattr(owner, name):
        raise SystemExit(f"_stamped_gateway: {module}.{path} is gone; update the stage list")
    return owner, name


def install(stamps: Stamps) -> None:
    for module, path, label in AFTER:
        stamps.wrap(*resolve_owner(module, path), label, before=False)
    for module, path, label in BEFORE:
        stamps.wrap(*resolve_owner(module, path), label, before=True)
    from gateway.http.openai_routes import InferenceEndpoint

    stamps.wrap_endpoint(InferenceEndpoint)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("gwctl", nargs=argparse.REMAINDER, help="-- then the gwctl arguments")
    args = parser.parse_args()
    stamps = Stamps()
    install(stamps)
    atexit.register(lambda: args.out.write_text(json.dumps(stamps.records)))
    from gateway.cli.gwctl import main as gwctl

    argv = args.gwctl[1:] if args.gwctl[:1] == ["--"] else args.gwctl
    return gwctl(argv)


if __name__ == "__main__":
    sys.exit(main())
