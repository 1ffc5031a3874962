"""The persistence worker: a child process that writes request-record batches to the database, so
the gateway's own process never does (see `stores.ProcessStore`).

    python -m gateway.persistence.worker

Reads length-prefixed JSON frames on stdin: first the `DatabaseConfig` (over the pipe, so the
database URL and its password are on no command line), then requests, each answered on stdout;
ignores SIGINT and SIGTERM; exits at end of input:
    {"op": "write", "rows": [...]}           -> {"ok": true, "rejected": [index, ...]}
    {"op": "replay", "spill": path, ...}     -> {"ok": true, "written": n, "rejected": m}
    any failure                              -> {"ok": false, "error": "..."}
"""

from __future__ import annotations

import logging
import signal
import sys
from functools import partial
from typing import Any, BinaryIO

import orjson
from sqlalchemy import Engine

from gateway.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.records import decode_row
from gateway.persistence.requests import write_batch
from gateway.persistence.spill import SpillFile, replay_file
from gateway.persistence.stores import FRAME

log = logging.getLogger("gateway.persistence.worker")


def handle(engine: Engine, request: dict[str, Any]) -> dict[str, Any]:
    if request["op"] == "write":
        batch = [decode_row(row) for row in request["rows"]]
        rejected = write_batch(engine, batch)
        ids = {id(item) for item in rejected}
        return {"ok": True, "rejected": [i for i, item in enumerate(batch) if id(item) in ids]}
    if request["op"] == "replay":
        spill = SpillFile(request["spill"], request["max_bytes"])
        written, refused = replay_file(partial(write_batch, engine), spill, request["batch_size"])
        return {"ok": True, "written": written, "rejected": refused}
    return {"ok": False, "error": f"unknown op {request['op']!r}"}


def serve(engine: Engine, stdin: BinaryIO, stdout: BinaryIO) -> None:
    while header := stdin.read(FRAME.size):
        if len(header) < FRAME.size:
            return
        (size,) = FRAME.unpack(header)
        request = orjson.loads(stdin.read(size))
        try:
            reply = handle(engine, request)
        except Exception as exc:  # the parent retries; the reason goes back in one line
            first = str(getattr(exc, "orig", None) or exc).strip().split("\n")[0]
            reply = {"ok": False, "error": f"{type(exc).__name__}: {first}"}
        body = orjson.dumps(reply)
        stdout.write(FRAME.pack(len(body)) + body)
        stdout.flush()


def read_config(stdin: BinaryIO) -> DatabaseConfig | None:
    header = stdin.read(FRAME.size)
    if len(header) < FRAME.size:
        return None
    (size,) = FRAME.unpack(header)
    return DatabaseConfig.model_validate_json(stdin.read(size))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Ctrl-C and a group-wide SIGTERM (systemd, `kill -TERM -PGID`) reach this process too: the
    # gateway decides when it ends (it closes stdin once its queue is flushed; if it dies, so does
    # stdin), or its last records would be spilled instead of written.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    config = read_config(sys.stdin.buffer)
    if config is None:
        return 0  # closed before it said anything
    engine = make_engine(config)
    try:
        serve(engine, sys.stdin.buffer, sys.stdout.buffer)
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
