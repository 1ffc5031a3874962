"""The agent probe over scripted clients and the fake sandbox: pass rate and interval, steps and
tokens, the frozen baseline, the reference, and the demotion rule."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

from probes.agent.fake_sandbox import FakeSandbox
from probes.agent.loop import AgentRun
from probes.agent.probe import AgentProbe, compare, summarise
from probes.agent.tasks import tasks_named
from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.client import ProbeUnavailable
from probes.settings import AgentSettings, ProbeSettings
from tests.fakes.catalog import make_endpoint

TASKS = tasks_named(["roman", "lru"])


class SolvingClient:
    """Writes the task's file then answers, on every `solve_every`-th task attempt; else answers at once."""

    def __init__(self, endpoint_id: str, solve_every: int = 1, down: bool = False) -> None:
        self.endpoint_id = endpoint_id
        self.solve_every = solve_every
        self.down = down
        self.attempts = 0
        self.requests = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        if self.down:
            raise ProbeUnavailable("connection refused")
        messages = body["messages"]
        usage = {"prompt_tokens": 50, "completion_tokens": 10}
        if messages[-1]["role"] == "user":
            self.attempts += 1
            if self.attempts % self.solve_every == 0:
                filename = "roman.py" if "roman.py" in messages[-1]["content"] else "lru_cache.py"
                call = {"id": "w", "type": "function",
                        "function": {"name": "write_file", "arguments": json.dumps({"path": filename, "content": "x = 1\n"})}}
                return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]},
                                     "finish_reason": "tool_calls"}], "usage": usage}
        return {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}], "usage": usage}


def context(client: Any, *, reference: Any = None, baselines: MemoryBaselines | None = None, **agent: Any) -> ProbeContext:
    settings = ProbeSettings(agent=AgentSettings(**{"attempts": 5, "min_attempts": 10, **agent}))
    return ProbeContext(endpoint=make_endpoint("p/m"), client=client, settings=settings,
                        baselines=baselines or MemoryBaselines(), rng=np.random.default_rng(0), clock=lambda: 1000.0,
                        reference=reference)


def probe() -> AgentProbe:
    return AgentProbe(FakeSandbox.reporting(None), TASKS)


async def test_first_run_reports_and_freezes_the_baseline() -> None:
    baselines = MemoryBaselines()
    progress: list[tuple[int, int]] = []
    ctx = context(SolvingClient("p/m"), baselines=baselines)
    ctx.progress = lambda done, total: progress.append((done, total))
    result = await probe().run(ctx)
    assert (result.probe, result.verdict, result.effect, result.samples) == ("agent", "inconclusive", "evidence", 10)
    assert result.statistic == 1.0 and result.p_value is None
    d = result.details or {}
    assert d["passes"] == 10 and d["ci95"][0] > 0.69 and d["steps_mean"] == 2.0 and d["baseline_frozen_now"]
    assert d["per_task"]["roman"] == {"passes": 5, "attempts": 5, "steps": 10, "tokens": 600, "stages": {"passed": 5}}
    assert result.tokens_spent == 1200 and result.requests == 20
    assert progress[-1] == (10, 10)
    assert await baselines.get("p/m", "agent", "pass_rate") == {"passes": 10, "attempts": 10, "tasks": ["roman", "lru"]}


async def test_same_pass_rate_later_passes() -> None:
    baselines = MemoryBaselines()
    await probe().run(context(SolvingClient("p/m"), baselines=baselines))
    result = await probe().run(context(SolvingClient("p/m"), baselines=baselines))
    assert result.verdict == "pass" and result.effect == "evidence" and result.p_value == 1.0
    assert (result.details or {})["comparisons"]["baseline"]["drop"] == 0.0


async def test_a_collapse_below_the_baseline_demotes() -> None:
    baselines = MemoryBaselines()
    await probe().run(context(SolvingClient("p/m"), baselines=baselines))
    result = await probe().run(context(SolvingClient("p/m", solve_every=5), baselines=baselines))
    d = result.details or {}
    assert result.statistic == 0.2 and d["comparisons"]["baseline"]["drop"] == 0.8
    assert result.verdict == "fail" and result.effect == "demote" and result.p_value is not None and result.p_value < 0.01
    assert d["per_task"]["lru"]["stages"] == {"file": 4, "passed": 1}


async def test_a_drop_with_too_few_attempts_fails_but_does_not_demote() -> None:
    baselines = MemoryBaselines()
    await probe().run(context(SolvingClient("p/m"), baselines=baselines, min_attempts=50))
    result = await probe().run(context(SolvingClient("p/m", solve_every=5), baselines=baselines, min_attempts=50))
    assert result.verdict == "fail" and result.effect == "evidence"


async def test_compared_with_the_reference_which_is_run_once_and_frozen() -> None:
    baselines = MemoryBaselines()
    reference = SolvingClient("ref/m")
    first = await probe().run(context(SolvingClient("p/m", solve_every=2), reference=reference, baselines=baselines))
    ref = (first.details or {})["comparisons"]["reference"]
    assert (ref["passes"], ref["attempts"], first.reference_samples) == (10, 10, 10)
    assert ref["drop"] == 0.5 and first.verdict == "fail" and first.effect == "demote"
    assert "baseline" not in (first.details or {})["comparisons"]
    asked = reference.requests
    await probe().run(context(SolvingClient("p/m", solve_every=2), reference=reference, baselines=baselines))
    assert reference.requests == asked  # the reference's pass count is frozen, not re-measured


async def test_an_unanswering_endpoint_is_an_error_not_a_failure() -> None:
    result = await probe().run(context(SolvingClient("p/m", down=True)))
    assert result.verdict == "error" and result.errors == 10 and result.samples == 0


def test_applicable_needs_tools() -> None:
    assert AgentProbe().applicable(make_endpoint("p/m")) is None
    assert "tool" in (AgentProbe().applicable(make_endpoint("p/m", capabilities={"tools": False})) or "")


def test_summarise_leaves_unanswered_runs_out() -> None:
    runs = [AgentRun(task="t", steps=2, stop="final"), AgentRun(task="t", steps=1, stop="unavailable")]
    s = summarise(runs)
    assert (s["attempts"], s["unanswered"], s["pass_rate"], s["stops"]) == (1, 1, 0.0, {"final": 1, "unavailable": 1})


def test_compare_applies_the_hard_rule_only_with_enough_attempts() -> None:
    settings = AgentSettings(min_attempts=20, demote_drop=0.25)
    assert compare(10, 20, {"passes": 18, "attempts": 20}, settings)["demote"]
    assert not compare(15, 20, {"passes": 18, "attempts": 20}, settings)["demote"]
    assert not compare(1, 5, {"passes": 18, "attempts": 20}, settings)["demote"]


async def test_reports_unavailable_and_runs_nothing_without_bubblewrap(tmp_path: Any) -> None:
    from probes.agent.sandbox import SubprocessSandbox

    sandbox = SubprocessSandbox(bwrap=str(tmp_path / "no-bwrap"))
    (task,) = tasks_named(["roman"])
    result = await AgentProbe(sandbox, [task]).run(context(SolvingClient("p/m")))
    # Inconclusive, not "error": a host without the sandbox is not the endpoint's fault.
    assert result.verdict == "inconclusive" and "bwrap" in (result.details or {})["unavailable"]


class SlowSolvingClient(SolvingClient):
    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return await super().chat(body)


async def test_the_suite_stops_starting_attempts_by_its_deadline_and_freezes_nothing() -> None:
    """It ignored its time: the runner stopped it and every attempt was lost; now it judges the
    attempts it finished, and a first run cut short freezes no baseline of part of the suite."""
    baselines = MemoryBaselines()
    ctx = context(SlowSolvingClient("p/m"), baselines=baselines)  # 10 attempts of 2 steps: 1 s
    ctx.deadline = asyncio.get_running_loop().time() + 0.5
    result = await probe().run(ctx)
    assert asyncio.get_running_loop().time() <= ctx.deadline
    d = result.details or {}
    assert result.verdict == "inconclusive" and 0 < result.samples < 10 and "time ran out" in d["reason"]
    assert await baselines.get("p/m", "agent", "pass_rate") is None and not d["baseline_frozen_now"]


class OnlyLru(SolvingClient):
    """Never solves `roman` (answers at once), always solves `lru` (two steps)."""

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(self.delay)
        messages = body["messages"]
        if messages[-1]["role"] == "user" and "roman.py" in messages[-1]["content"]:
            self.requests += 1
            return {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 50, "completion_tokens": 10}}
        return await super().chat(body)

    delay = 0.0


async def test_a_run_cut_short_is_reported_not_judged() -> None:
    """The tasks a cut run reached are not the suite's mix its baseline holds: an unchanged endpoint
    that never solves the first task and always the second failed, and met the demotion rule, on a
    run cut after the first task. Now reported, inconclusive, never a demotion."""
    baselines = MemoryBaselines()
    settings = {"attempts": 10, "min_attempts": 10}
    await probe().run(context(OnlyLru("p/m"), baselines=baselines, **settings))  # freezes 10 of 20
    slow = OnlyLru("p/m")
    slow.delay = 0.05
    ctx = context(slow, baselines=baselines, **settings)
    ctx.deadline = asyncio.get_running_loop().time() + 0.6
    result = await probe().run(ctx)
    d = result.details or {}
    assert d["per_task"]["roman"]["passes"] == 0 and result.samples < 20
    assert d["out_of_time"] is True and "time ran out" in d["reason"]
    assert result.verdict == "inconclusive" and result.effect == "evidence"
