"""The schema worker process: the same reports as classifying inline, a check past its deadline
kills the worker (the next check gets a fresh one), a bounded number wait, and the loop stays free."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from probes.settings import ToolMonitorSettings
from probes.toolcalls.checker import InlineChecker, ProcessChecker
from tests.probes.toolcalls.test_validator import REQUEST, call, response


def exponential(levels: int = 40) -> dict[str, Any]:
    """Small, satisfiable, local refs only, and 2**levels steps to reject a string: each level is
    an anyOf of the level below, twice."""
    defs: dict[str, Any] = {"a0": {"type": "integer"}}
    for i in range(1, levels + 1):
        defs[f"a{i}"] = {"anyOf": [{"$ref": f"#/$defs/a{i - 1}"}, {"$ref": f"#/$defs/a{i - 1}"}]}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/a{levels}"}}}


SLOW_REQUEST = {"tools": [{"type": "function", "function": {"name": "f", "parameters": exponential()}}]}
SLOW_RESPONSE = response(call("f", '{"x": "not a number"}'))
CASES = [
    response(call("get_weather", '{"city": "Paris"}')),
    response(call("get_weather", '{"city": 3}')),
    response(call("get_wether", "{}")),
    response(content='{"name": "get_weather", "arguments": {"city": "Oslo"}}', finish="stop"),
]


async def test_the_worker_reports_what_inline_classification_does() -> None:
    checker = ProcessChecker(ToolMonitorSettings(check_timeout=5.0))
    inline = InlineChecker()
    try:
        for resp in CASES:
            assert await checker.check(resp, REQUEST) == await inline.check(resp, REQUEST)
        assert checker.stats.checked == len(CASES) and checker.stats.started == 1
    finally:
        await checker.aclose()


async def test_a_check_past_its_deadline_kills_the_worker_and_the_next_gets_a_fresh_one() -> None:
    checker = ProcessChecker(ToolMonitorSettings(check_timeout=0.5))
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:  # the loop must stay free while the worker grinds
        while not stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - started - 0.01)

    try:
        assert (await checker.check(CASES[0], REQUEST)) is not None  # a started worker
        tick = asyncio.create_task(ticker())
        started = time.perf_counter()
        assert await checker.check(SLOW_RESPONSE, SLOW_REQUEST) is None
        took = time.perf_counter() - started
        stop.set()
        await tick
        assert checker.stats.timed_out == 1 and 0.5 <= took < 5.0
        assert max(lags) < 0.25, max(lags)
        report = await checker.check(CASES[1], REQUEST)
        assert report is not None and report.counts() == {"schema_mismatch": 1}
        assert checker.stats.started == 2
    finally:
        await checker.aclose()


async def test_at_most_max_pending_checks_wait_the_rest_are_not_checked() -> None:
    checker = ProcessChecker(ToolMonitorSettings(check_timeout=0.5, max_pending=2))
    try:
        await checker.check(CASES[0], REQUEST)
        results = await asyncio.gather(*(checker.check(SLOW_RESPONSE, SLOW_REQUEST) for _ in range(5)))
        assert results == [None] * 5
        assert checker.stats.skipped == 3 and checker.stats.timed_out == 2  # never more than 2 in line
    finally:
        await checker.aclose()


async def test_closing_stops_the_worker() -> None:
    checker = ProcessChecker(ToolMonitorSettings())
    await checker.check(CASES[0], REQUEST)
    proc = checker._proc
    assert proc is not None and proc.returncode is None
    await checker.aclose()
    assert proc.returncode is not None


async def test_the_worker_gets_no_secrets_and_a_memory_limit(monkeypatch: Any) -> None:
    monkeypatch.setenv("GW_AUTH__ADMIN_KEY", "sk-admin-must-not-leak-0001")
    checker = ProcessChecker(ToolMonitorSettings())
    try:
        await checker.check(CASES[0], REQUEST)
        proc = checker._proc
        assert proc is not None
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
    finally:
        await checker.aclose()
    assert b"sk-admin-must-not-leak" not in environ and b"GW_" not in environ
    (line,) = [ln for ln in limits.splitlines() if ln.startswith("Max address space")]
    assert line.split()[3] == str(1 << 30)
