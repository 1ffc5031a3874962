"""The schema worker: a child process that classifies responses against clients' tool schemas, so
the gateway's own process never runs an untrusted schema (see `probes.toolcalls.checker`).

    python -m probes.toolcalls.worker '{"max_bytes": 65536, "max_depth": 32}'

Says {"ready": true} once imported, then reads length-prefixed JSON frames on stdin and answers
each on stdout; exits at end of input:
    {"response": {...}, "tools": [...], "tool_choice": ...}  -> {"ok": true, "report": [...]}
    anything that fails (a bad frame, out of memory)         -> {"ok": false, "error": "..."}
"""

from __future__ import annotations

import resource
import sys
from typing import Any, BinaryIO

import orjson

from probes.toolcalls.checker import FRAME, report_json
from probes.toolcalls.schemas import SchemaLimits
from probes.toolcalls.validator import SchemaCache, ToolSpec, classify_response

MEMORY_LIMIT = 1 << 30  # bytes of address space: a hostile schema gets a MemoryError, not the host's memory


def handle(schemas: SchemaCache, request: dict[str, Any]) -> dict[str, Any]:
    spec = ToolSpec.from_request(request)
    return {"ok": True, "report": report_json(classify_response(request["response"], spec, schemas))}


def serve(schemas: SchemaCache, stdin: BinaryIO, stdout: BinaryIO) -> None:
    _write(stdout, {"ready": True})
    while header := stdin.read(FRAME.size):
        if len(header) < FRAME.size:
            return
        (size,) = FRAME.unpack(header)
        try:
            reply = handle(schemas, orjson.loads(stdin.read(size)))
        except (Exception, RecursionError, MemoryError) as exc:
            reply = {"ok": False, "error": type(exc).__name__}
        _write(stdout, reply)


def _write(stdout: BinaryIO, reply: dict[str, Any]) -> None:
    body = orjson.dumps(reply)
    stdout.write(FRAME.pack(len(body)) + body)
    stdout.flush()


def main(argv: list[str]) -> int:
    limits = SchemaLimits(**orjson.loads(argv[1]))
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    try:
        serve(SchemaCache(limits=limits, client=True), sys.stdin.buffer, sys.stdout.buffer)
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
