"""Classify live responses against their requests' tools off the event loop, under a deadline.

A client's schema is untrusted: even with the safeguards of `probes.toolcalls.schemas`, a small
schema can make validation take exponential time, and a thread cannot be stopped. So checks run
in one child process (`probes.toolcalls.worker`), one at a time:
- a check that runs past `check_timeout` kills the worker (the next check starts a fresh one) and
  comes back None, "unchecked": a stuck validation never blocks the loop and never piles up;
- at most `max_pending` checks wait for it; past that a response is not checked at all (None);
- the worker has a memory limit, an environment without the gateway's secrets, and exits when
  its stdin closes (so with the gateway).
Only the parts of a response the validator reads cross the pipe (calls, finish reasons, the start
of the content), and only counts come back.

`InlineChecker` classifies on the caller's loop: for trusted schemas and for tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from probes.settings import ToolMonitorSettings
from probes.toolcalls.validator import (
    LEAK_SCAN_CHARS,
    ChoiceReport,
    ResponseReport,
    SchemaCache,
    ToolSpec,
    classify_response,
)

log = logging.getLogger("probes.toolcalls")
FRAME = struct.Struct(">I")
START_TIMEOUT = 60.0  # seconds for a fresh worker to import and say it is ready (a busy machine)


class ResponseChecker(Protocol):
    async def check(self, response: Mapping[str, Any], request: Mapping[str, Any]) -> ResponseReport | None:
        """The response's report, or None when it could not be checked safely in time."""
        ...

    async def aclose(self) -> None: ...


def compact(response: Mapping[str, Any]) -> dict[str, Any]:
    """What the validator reads of a response: each choice's finish reason, calls and content start."""
    choices = []
    for choice in response.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        content = message.get("content")
        text = content[:LEAK_SCAN_CHARS] if isinstance(content, str) else None
        kept = {"tool_calls": message.get("tool_calls"), "content": text}
        choices.append({"finish_reason": choice.get("finish_reason"), "message": kept})
    return {"choices": choices}


def tools_of(request: Mapping[str, Any]) -> dict[str, Any]:
    return {"tools": request.get("tools"), "tool_choice": request.get("tool_choice", "auto")}


def report_json(report: ResponseReport) -> list[list[Any]]:
    return [[list(c.calls), c.leaked, c.finish_mismatch, c.truncated] for c in report.choices]


def report_from_json(raw: Any) -> ResponseReport:
    return ResponseReport(tuple(ChoiceReport(tuple(calls), bool(lk), bool(fm), bool(tr)) for calls, lk, fm, tr in raw))


class InlineChecker:
    def __init__(self, schemas: SchemaCache | None = None) -> None:
        self._schemas = schemas or SchemaCache(client=True)

    async def check(self, response: Mapping[str, Any], request: Mapping[str, Any]) -> ResponseReport | None:
        return classify_response(compact(response), ToolSpec.from_request(tools_of(request)), self._schemas)

    async def aclose(self) -> None:
        return None


@dataclass(slots=True)
class CheckerStats:
    checked: int = 0
    timed_out: int = 0  # the worker was killed at the deadline
    skipped: int = 0  # too many waiting: not checked
    failed: int = 0  # the worker could not start, answered an error, or died
    started: int = 0


class ProcessChecker:
    def __init__(self, settings: ToolMonitorSettings, *, start_timeout: float = START_TIMEOUT) -> None:
        self._settings = settings
        self._start_timeout = start_timeout
        self._limits = orjson.dumps(
            {"max_bytes": settings.schema_max_bytes, "max_depth": settings.schema_max_depth}
        ).decode()
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._waiting = 0
        self.stats = CheckerStats()

    async def check(self, response: Mapping[str, Any], request: Mapping[str, Any]) -> ResponseReport | None:
        if self._waiting >= self._settings.max_pending:
            self.stats.skipped += 1
            return None
        try:
            frame = orjson.dumps({"response": compact(response), **tools_of(request)})
        except TypeError:  # not JSON (cannot happen for a parsed body; never worth a crash)
            self.stats.failed += 1
            return None
        self._waiting += 1
        try:
            async with self._lock:
                return await self._call(frame)
        finally:
            self._waiting -= 1

    async def _call(self, frame: bytes) -> ResponseReport | None:
        proc = await self._started()
        if proc is None:
            self.stats.failed += 1
            return None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            async with asyncio.timeout(self._settings.check_timeout):
                proc.stdin.write(FRAME.pack(len(frame)) + frame)
                await proc.stdin.drain()
                reply = await _read_frame(proc.stdout)
        except TimeoutError:
            self.stats.timed_out += 1
            await self._discard()
            return None
        except (ConnectionError, asyncio.IncompleteReadError, OSError, ValueError):
            self.stats.failed += 1
            await self._discard()
            return None
        except BaseException:  # cancelled mid-frame: the pipe is out of step, start afresh
            await self._discard()
            raise
        if not reply.get("ok"):
            self.stats.failed += 1
            return None
        self.stats.checked += 1
        return report_from_json(reply["report"])

    async def _started(self) -> asyncio.subprocess.Process | None:
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        root = str(Path(__file__).resolve().parents[2])
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": root}  # none of the gateway's secrets
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "probes.toolcalls.worker", self._limits,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
        except OSError as exc:
            log.warning("tool-call monitor: cannot start the schema worker: %s", exc)
            return None
        self._proc = proc
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(self._start_timeout):
                ready = await _read_frame(proc.stdout)
        except (TimeoutError, asyncio.IncompleteReadError, ValueError):
            ready = {}
        except BaseException:
            await self._discard()
            raise
        if not ready.get("ready"):
            log.warning("tool-call monitor: the schema worker did not start")
            await self._discard()
            return None
        self.stats.started += 1
        return proc

    async def _discard(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            proc.kill()
        await proc.wait()

    async def aclose(self) -> None:
        async with self._lock:
            proc = self._proc
            if proc is None or proc.returncode is not None:
                self._proc = None
                return
            assert proc.stdin is not None
            proc.stdin.close()  # the worker exits at end of input
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except TimeoutError:
                pass
            await self._discard()


async def _read_frame(stream: asyncio.StreamReader) -> dict[str, Any]:
    (size,) = FRAME.unpack(await stream.readexactly(FRAME.size))
    reply = orjson.loads(await stream.readexactly(size))
    if not isinstance(reply, dict):
        raise ValueError("not a reply")
    return reply
