"""Request records as rows of `request_log` and as lines of the spill file.

A queued record is ``(at, record)``: `at` is the wall-clock time (epoch seconds) it was submitted,
stamped by the sink because the accountant's clock is monotonic.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import orjson

from gateway.persistence.types import utc
from kernel.records import RequestRecord

Stamped = tuple[float, RequestRecord]

_FIELDS = tuple(f.name for f in fields(RequestRecord))
_BODIES = ("request_body", "response_body")
_BODY_INDEX = tuple(1 + _FIELDS.index(name) for name in _BODIES)  # in an encoded row


def _cut(text: str | None, n: int) -> str | None:
    return text if text is None or len(text) <= n else text[:n]


# request_log's columns, in the order `to_values` gives them.
COLUMNS = (
    "at", "request_id", "key_name", "model", "endpoint_id", "op", "stream", "attempts", "status", "error",
    "prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd", "ttft_ms", "latency_ms", "overhead_ms",
    "request_body", "response_body", "error_detail", "api",
)  # fmt: skip


def to_values(at: float, record: RequestRecord, *, sqlite: bool) -> tuple[Any, ...]:
    """One `request_log` row as a tuple for the driver's bulk path (no per-row SQLAlchemy work).
    Strings are cut to their column's size: one odd value must not get its whole batch refused.
    SQLite gets the time as SQLAlchemy stores it there (naive UTC text), PostgreSQL a timestamptz."""
    when = utc(at)
    return (
        when.replace(tzinfo=None).isoformat(" ", "microseconds") if sqlite else when,
        record.request_id[:128],
        _cut(record.key_name, 128),
        record.model[:256],
        _cut(record.endpoint_id, 256),
        record.op[:16],
        int(record.stream) if sqlite else record.stream,
        record.attempts,
        record.status,
        _cut(record.error, 64),
        record.prompt_tokens,
        record.cached_tokens,
        record.completion_tokens,
        record.cost_usd,
        record.ttft_s * 1000.0 if record.ttft_s is not None else None,
        record.latency_s * 1000.0,
        record.overhead_ms,
        _text(record.request_body),
        _text(record.response_body),
        _cut(record.error_detail, 1000),
        _cut(record.api, 16),
    )


def _text(body: object) -> str | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    return orjson.dumps(body).decode()


def encode_line(at: float, record: RequestRecord) -> bytes:
    data = {name: getattr(record, name) for name in _FIELDS}
    for name in _BODIES:
        if name in data:
            data[name] = _text(data[name])
    data["at"] = at
    return orjson.dumps(data) + b"\n"


def decode_line(line: bytes) -> Stamped:
    data = orjson.loads(line)
    at = data.pop("at")
    known = {name: data[name] for name in _FIELDS if name in data}
    return at, RequestRecord(**known)


def encode_row(at: float, record: RequestRecord) -> list[Any]:
    """A record as a JSON-able list, for the pipe to the persistence worker."""
    row: list[Any] = [at]
    row.extend(getattr(record, name) for name in _FIELDS)
    for i in _BODY_INDEX:
        row[i] = _text(row[i])
    return row


def decode_row(row: list[Any]) -> Stamped:
    return row[0], RequestRecord(*row[1:])
