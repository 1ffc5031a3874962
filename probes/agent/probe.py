"""The agent-eval probe: every task `attempts` times through the agent loop, graded in the sandbox.

Reports the pass rate with a Wilson interval, steps and tokens, and per-task results, and compares
the pass rate with the endpoint's own frozen baseline (frozen on its first run) and with the
reference's (run and frozen the first time it is needed), each by a one-sided Fisher exact test.
A pass rate more than `demote_drop` below either, with at least `min_attempts` on both sides, is the
hard rule of research/probes.md 2.6 and comes back with effect "demote". Runs that the endpoint
did not answer are availability evidence and are left out of the pass rate. Where the host cannot
provide the sandbox, the probe reports `unavailable` (an inconclusive result naming why) and runs no
model-written code at all.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from probes.agent.loop import AgentRun, ChatClient, LoopConfig, run_agent
from probes.agent.sandbox import Sandbox, SandboxUnavailable, SubprocessSandbox
from probes.agent.stats import fisher_less, wilson_interval
from probes.agent.tasks import tasks_named
from probes.agent.tasks.base import Task
from probes.base import Effect, Outcome, ProbeContext, ProbeResult, Verdict
from probes.deadline import stop_at

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.settings import AgentSettings

BASELINE_KEY = "pass_rate"


def summarise(runs: Sequence[AgentRun]) -> dict[str, Any]:
    """Pass counts, steps and tokens over the runs the endpoint answered, overall and per task."""
    graded = [r for r in runs if r.stop != "unavailable"]
    per_task: dict[str, dict[str, Any]] = {}
    for r in graded:
        t = per_task.setdefault(r.task, {"passes": 0, "attempts": 0, "steps": 0, "tokens": 0, "stages": Counter()})
        t["passes"] += r.passed
        t["attempts"] += 1
        t["steps"] += r.steps
        t["tokens"] += r.tokens
        t["stages"][r.grade.stage if r.grade else "none"] += 1
    for t in per_task.values():
        t["stages"] = dict(t["stages"])
    passes, n = sum(r.passed for r in graded), len(graded)
    lo, hi = wilson_interval(passes, n)
    return {
        "passes": passes, "attempts": n, "pass_rate": passes / n if n else None, "ci95": [lo, hi],
        "steps_mean": sum(r.steps for r in graded) / n if n else None,
        "tokens": sum(r.tokens for r in runs), "unanswered": len(runs) - n,
        "stops": dict(Counter(r.stop for r in runs)), "per_task": per_task,
    }


def compare(passes: int, n: int, other: dict[str, Any], settings: AgentSettings) -> dict[str, Any]:
    """This run against a frozen pass count: the drop, the one-sided p-value, and the hard rule."""
    other_n, other_passes = int(other["attempts"]), int(other["passes"])
    rate, other_rate = (passes / n if n else 0.0), (other_passes / other_n if other_n else 0.0)
    drop = other_rate - rate
    enough = n >= settings.min_attempts and other_n >= settings.min_attempts
    return {
        "passes": other_passes, "attempts": other_n, "pass_rate": other_rate, "drop": drop,
        "p_value": fisher_less(passes, n, other_passes, other_n),
        "demote": enough and drop > settings.demote_drop,
    }


class AgentProbe:
    name: ClassVar[str] = "agent"
    effect: ClassVar[Effect] = "evidence"

    def __init__(self, sandbox: Sandbox | None = None, tasks: Sequence[Task] | None = None) -> None:
        self._sandbox = sandbox
        self._tasks = tuple(tasks) if tasks is not None else None

    def applicable(self, endpoint: Endpoint) -> str | None:
        if not endpoint.deployment.capabilities.tools:
            return "the deployment does not support tool calls"
        return None

    async def _run_suite(
        self, client: ChatClient, ctx: ProbeContext, tasks: Sequence[Task]
    ) -> tuple[list[AgentRun], str | None]:
        """Every task `attempts` times, and why it stopped short (None: it ran whole): with a
        deadline, no attempt starts that the longest one so far would not finish by then."""
        cfg = ctx.settings.agent
        sandbox = self._sandbox or SubprocessSandbox()
        runs: list[AgentRun] = []
        total = len(tasks) * cfg.attempts
        loop, until, longest = asyncio.get_running_loop(), stop_at(ctx.deadline), 0.0
        for task in tasks:
            for _ in range(cfg.attempts):
                if until is not None and loop.time() + longest > until:
                    return runs, f"{len(runs)} of {total} attempts before the end of the probe's time"
                seed = int(ctx.rng.integers(0, 2**31 - 1))
                config = LoopConfig(cfg.max_steps, cfg.max_tokens, cfg.temperature, seed)
                began = loop.time()
                runs.append(await run_agent(task, client, sandbox, config))
                longest = max(longest, loop.time() - began)
                ctx.progress(len(runs), total)
        return runs, None

    async def _frozen(self, ctx: ProbeContext, endpoint_id: str, tasks: Sequence[Task],
                      run: Any) -> tuple[dict[str, Any] | None, bool]:
        """The frozen summary for `endpoint_id`, made now by `run()` (and frozen) when there is none;
        a run cut short by time freezes nothing (a baseline of part of the suite)."""
        names = [t.name for t in tasks]
        stored = await ctx.baselines.get(endpoint_id, self.name, BASELINE_KEY)
        if stored is not None:
            return (dict(stored) if list(stored.get("tasks", [])) == names else None), False
        summary = await run()
        if not summary["attempts"] or summary.get("cut"):
            return None, False
        frozen = {"passes": summary["passes"], "attempts": summary["attempts"], "tasks": names}
        await ctx.baselines.put(endpoint_id, self.name, BASELINE_KEY, frozen, at=ctx.clock())
        return frozen, True

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        cfg = ctx.settings.agent
        tasks = self._tasks or tasks_named(list(cfg.tasks))
        try:
            runs, cut = await self._run_suite(ctx.client, ctx, tasks)
        except SandboxUnavailable as exc:
            # The host's fault, not the endpoint's: no code ran unsandboxed, and no state moves.
            return ProbeResult(self.name, "inconclusive", 0, details={"unavailable": str(exc)}, effect=self.effect)
        summary = summarise(runs)
        if cut:
            summary["cut"] = cut
        spent = {"tokens": sum(r.tokens for r in runs), "requests": sum(r.steps for r in runs),
                 "errors": summary["unanswered"]}
        if not summary["attempts"]:
            outcome = Outcome(statistic=0.0, samples=0, details=summary)
            return ProbeResult.of(self.name, "error", outcome, effect=self.effect, **spent)

        async def this_run() -> dict[str, Any]:
            return summary

        baseline, froze = await self._frozen(ctx, ctx.endpoint.id, tasks, this_run)
        comparisons: dict[str, dict[str, Any]] = {}
        if baseline is not None and not froze:
            comparisons["baseline"] = compare(summary["passes"], summary["attempts"], baseline, cfg)
        reference = ctx.reference
        if reference is not None:

            async def reference_run() -> dict[str, Any]:
                ref_runs, ref_cut = await self._run_suite(reference, ctx, tasks)
                return {**summarise(ref_runs), "cut": ref_cut}

            ref, _ = await self._frozen(ctx, reference.endpoint_id, tasks, reference_run)
            if ref is not None:
                comparisons["reference"] = compare(summary["passes"], summary["attempts"], ref, cfg)
        p = min(1.0, min(c["p_value"] for c in comparisons.values()) * len(comparisons)) if comparisons else None
        demote = any(c["demote"] for c in comparisons.values())
        alpha = min(cfg.alpha, ctx.settings.health.confirm_alpha) if ctx.confirm else cfg.alpha
        verdict: Verdict = "fail" if demote or (p is not None and p <= alpha) else "pass" if p is not None else "inconclusive"
        extra: dict[str, Any] = {}
        if cut:
            # The tasks it reached are not the suite's mix the baselines hold: reported, not judged.
            verdict, demote = "inconclusive", False
            extra = {"reason": f"time ran out: {cut}; a part of the suite is neither judged against the "
                               "baselines nor frozen as one", "out_of_time": True}
        outcome = Outcome(
            statistic=summary["pass_rate"], p_value=p, samples=summary["attempts"],
            reference_samples=comparisons["reference"]["attempts"] if "reference" in comparisons else None,
            details={**summary, "comparisons": comparisons, "baseline_frozen_now": froze, **extra},
        )
        return ProbeResult.of(self.name, verdict, outcome, effect="demote" if demote else self.effect, **spent)
