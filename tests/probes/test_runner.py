"""The runner with fake probes and fake clients: contexts, errors as availability evidence, the
policy applied through HealthStates, the confirmatory round, persistence, and the loud warning
when the last endpoint of a model is demoted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson
import pytest

from gateway.catalog import Endpoint
from gateway.health_states import HealthStates
from gateway.state_store.memory import MemoryStore
from kernel.health import Transition
from probes.base import Effect, Grounds, ProbeContext, ProbeResult, Verdict
from probes.baselines import MemoryBaselines
from probes.budget import BudgetExhausted, ProbeBudget
from probes.client import ProbeUnavailable
from probes.evidence import EvidenceStore
from probes.prompt_identity import fingerprint
from probes.registry import ProbeRegistry
from probes.runner import ProbeRunner, make_client_factory
from probes.settings import HealthSettings, ProbeSettings
from probes.template_check import MESSAGES as TEMPLATE_MESSAGES
from probes.template_check import TemplateCheck
from providers.http_mock import MockHTTPClient, MockResponse
from providers.llamacpp import LlamaCppAdapter
from tests.fakes.catalog import make_catalog, make_endpoint
from tests.fakes.clock import FakeClock

# Extra prompt tokens an endpoint's chat template adds (the audit-start template check reads them).
TEMPLATE_EXTRA: dict[str, int] = {}
# Endpoint -> (n, extra): every n-th answer of a client is counted with `extra` more prompt tokens
# (a share of requests served by another model's tokenizer).
MIXED: dict[str, tuple[int, int]] = {}


@dataclass
class FakeClient:
    endpoint: Endpoint
    tokens: int = 0
    requests: int = 0
    errors: int = 0
    prompt_counts: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def endpoint_id(self) -> str:
        return self.endpoint.id

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = sum(len(m["content"].split()) for m in body["messages"]) + TEMPLATE_EXTRA.get(self.endpoint.id, 0)
        self.requests += 1
        every, extra = MIXED.get(self.endpoint.id, (0, 0))
        if every and self.requests % every == 0:
            prompt += extra
        self.prompt_counts.append((fingerprint({"model": self.endpoint.model, **body}), prompt))
        return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}}


@dataclass
class Script:
    """What each fake probe answers, in turn (the last answer repeats), and the contexts it saw."""

    verdicts: dict[str, list[Verdict | Exception]] = field(default_factory=dict)
    seen: list[tuple[str, ProbeContext]] = field(default_factory=list)
    grounds: dict[str, Grounds] = field(default_factory=dict)  # what each probe's failures rest on

    def probe(self, name: str, effect: Effect = "evidence", *, skip: str | None = None, sends: int = 0) -> Callable[[], Any]:
        """`sends`: identical chat requests the probe sends through its client before answering."""
        script = self

        class Fake:
            def __init__(self) -> None:
                self.name, self.effect = name, effect

            def applicable(self, endpoint: Endpoint) -> str | None:
                return skip

            async def run(self, ctx: ProbeContext) -> ProbeResult:
                script.seen.append((name, ctx))
                for _ in range(sends):
                    await ctx.client.chat({"messages": [{"role": "user", "content": f"say {name}"}], "max_tokens": 1})
                answers = script.verdicts.get(name, ["pass"])
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                ctx.client.tokens += 7  # type: ignore[attr-defined]
                ctx.client.requests += 1  # type: ignore[attr-defined]
                ctx.progress(1, 1)
                if isinstance(answer, Exception):
                    ctx.client.errors += 1  # type: ignore[attr-defined]
                    raise answer
                p = 0.001 if answer == "fail" else 0.5
                e = 10.5 if answer == "fail" else 0.5
                return ProbeResult(name, answer, 10, statistic=0.1, p_value=p, e_value=e, effect=self.effect,
                                   grounds=script.grounds.get(name, "self"))

        return Fake


class FakeRuns:
    """A `ProbeRunStore` that records each call (name, positional args, keyword args)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.transitions: list[Transition] = []

    async def start_run(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append(("start_run", args, kwargs))
        return 41 + sum(1 for c in self.calls if c[0] == "start_run")

    async def add_results(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("add_results", args, kwargs))

    async def finish_run(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("finish_run", args, kwargs))

    async def record_transition(self, t: Transition, **kwargs: Any) -> bool:
        self.transitions.append(t)
        return True


HEALTH = HealthSettings(demoted_min_seconds=0, probation_seconds=0, clean_windows=1)
A = make_endpoint("prov-a/m", "m", provider="prov-a")
B = make_endpoint("prov-b/m", "m", provider="prov-b")
LOCAL = replace(make_endpoint("local-0", "m", provider="local"), region="local")


def make_runner(script: Script, *endpoints: Endpoint, references: dict[str, str] | None = None,
                persistence: Any = None, sends: int = 0, **settings: Any) -> tuple[ProbeRunner, HealthStates, FakeClock]:
    clock = FakeClock(start=1_700_000_000.0)
    health = HealthStates({"database": persistence.record_transition} if persistence is not None else None)
    registry = ProbeRegistry(
        {
            "logprob_drift": script.probe("logprob_drift", sends=sends),
            "distribution": script.probe("distribution", "confirm", sends=sends),
            "fidelity": script.probe("fidelity", sends=sends),
            "needs_tools": script.probe("needs_tools", skip="no tools"),
        },
        suites={"quality": ("logprob_drift", "distribution", "fidelity")},
    )
    runner = ProbeRunner(
        catalog=make_catalog(*(endpoints or (A, B))),
        health=health,
        settings=ProbeSettings(health=HEALTH, references=references or {}, seed=3, **settings),
        registry=registry,
        evidence=EvidenceStore(MemoryStore(clock)),
        baselines=MemoryBaselines(),
        client_factory=FakeClient,  # type: ignore[arg-type]
        wall=clock,
        rng=np.random.default_rng(1),
        persistence=persistence,
    )
    return runner, health, clock


async def test_a_clean_round_streams_events_and_changes_nothing() -> None:
    script = Script()
    runner, health, _ = make_runner(script)
    events: list[dict[str, Any]] = []
    report = await runner.run(A.id, ["logprob_drift", "fidelity"], trigger="manual", emit=events.append)
    kinds = [e["event"] for e in events]
    assert kinds == ["started", "probe", "progress", "result", "probe", "progress", "result", "finished"]
    assert [r.verdict for r in report.rounds[0].results] == ["pass", "pass"]
    assert report.rounds[0].results[0].tokens_spent == 7 and report.rounds[0].results[0].requests == 1
    assert health.state(A.id) == "healthy" and not report.degraded
    assert events[-1]["verdict"] == "pass" and events[-1]["state"] == "healthy"


async def test_a_failing_audit_is_confirmed_and_demotes() -> None:
    script = Script({"logprob_drift": ["fail"], "distribution": ["fail"]})
    persistence = FakeRuns()
    runner, health, _ = make_runner(script, persistence=persistence)
    events: list[dict[str, Any]] = []
    report = await runner.run(A.id, ["logprob_drift"], trigger="manual", emit=events.append)
    assert [r.confirm for r in report.rounds] == [False, True]
    # The alarming probe re-run fresh as a confirmatory test; its failure on the endpoint's own
    # grounds settles the round (no fleet gate here), so the distribution test and fidelity after
    # it are not run, and say why.
    assert [(name, ctx.confirm) for name, ctx in script.seen] == [("logprob_drift", False), ("logprob_drift", True)]
    skipped = [r for r in report.rounds[1].results if "settled_by" in (r.details or {})]
    assert [r.probe for r in skipped] == ["distribution", "fidelity"]
    assert all(r.verdict == "inconclusive" and (r.details or {})["settled_by"] == "logprob_drift" for r in skipped)
    assert [(t.from_state, t.to_state) for t in persistence.transitions] == [("healthy", "suspect"), ("suspect", "demoted")]
    assert health.state(A.id) == "demoted" and health.get(A.id).score == 0.0 and report.degraded
    assert persistence.transitions[1].evidence is not None and persistence.transitions[1].evidence["run_id"] == 43
    assert [e["to"] for e in events if e["event"] == "transition"] == ["suspect", "demoted"]
    stored = [c[0] for c in persistence.calls]
    assert stored == ["start_run", "add_results", "finish_run", "start_run", "add_results", "finish_run"]
    assert persistence.calls[0][2]["trigger"] == "manual"
    assert persistence.calls[2][1][1] == "fail"  # the first round's verdict


async def test_a_reference_only_failure_makes_the_endpoint_suspect_not_demoted() -> None:
    """Drift and distribution fail against the reference, fidelity (the endpoint against itself) passes:
    SUSPECT after the confirmatory round, with the reason; a failing fidelity then demotes."""
    script = Script({"logprob_drift": ["fail"], "distribution": ["fail"]},
                    grounds={"logprob_drift": "reference", "distribution": "reference"})
    persistence = FakeRuns()
    runner, health, _ = make_runner(script, persistence=persistence)
    report = await runner.run(A.id, ["logprob_drift"], trigger="manual")
    assert [(t.from_state, t.to_state) for t in persistence.transitions] == [("healthy", "suspect")]
    assert health.state(A.id) == "suspect"
    assert "reference disagreement alone" in report.rounds[1].decision.reason
    assert persistence.transitions[0].evidence is not None
    assert persistence.transitions[0].evidence["results"][0]["grounds"] == "reference"
    script.verdicts["fidelity"] = ["fail"]
    await runner.run(A.id, ["logprob_drift"], trigger="manual")
    assert health.state(A.id) == "demoted"
    assert "confirmed independently by fidelity fail" in persistence.transitions[-1].reason


async def test_a_passing_confirmation_restores_healthy() -> None:
    script = Script({"fidelity": ["fail", "pass"]})
    runner, health, _ = make_runner(script)
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    assert [t.to_state for r in report.rounds if (t := r.transition)] == ["suspect", "healthy"]
    assert health.state(A.id) == "healthy" and health.get(A.id).score == 1.0
    assert not report.degraded  # the confirmatory round cleared the first failure
    assert (await runner.evidence.get(A.id)).cusum == {}


async def test_demoted_then_clean_goes_through_probation_to_healthy() -> None:
    script = Script({"fidelity": ["fail", "fail", "pass"]})
    runner, health, clock = make_runner(script)
    await runner.run(A.id, ["fidelity"], trigger="manual")
    assert health.state(A.id) == "demoted"
    clock.advance(1)
    assert (await runner.run(A.id, ["fidelity"], trigger="manual")).state == "probation"
    assert health.get(A.id).score == HEALTH.probation_weight
    clock.advance(1)
    assert (await runner.run(A.id, ["fidelity"], trigger="manual")).state == "healthy"


@pytest.mark.parametrize("error", [ProbeUnavailable("prov-a/m: connection refused"), BudgetExhausted("spent")])
async def test_upstream_errors_are_availability_evidence_not_quality(error: Exception) -> None:
    script = Script({"logprob_drift": [error]})
    runner, health, _ = make_runner(script)
    report = await runner.run(A.id, ["logprob_drift"], trigger="manual")
    (result,) = report.rounds[0].results
    assert result.verdict == "error" and result.errors == 1 and str(error) in result.details["error"]  # type: ignore[index]
    assert health.state(A.id) == "healthy" and len(report.rounds) == 1
    evidence = await runner.evidence.get(A.id)
    assert evidence.errors == 1 and str(error) in evidence.last_error and evidence.cusum == {}


async def test_a_probe_bug_becomes_an_error_result() -> None:
    script = Script({"fidelity": [ZeroDivisionError("oops")]})
    runner, _, _ = make_runner(script)
    (result,) = (await runner.run(A.id, ["fidelity"])).rounds[0].results
    assert result.verdict == "error" and result.details["error"] == "ZeroDivisionError: oops"  # type: ignore[index]


async def test_inapplicable_and_missing_probes_are_reported() -> None:
    script = Script()
    runner, _, _ = make_runner(script)
    runner.registry = ProbeRegistry({**{n: runner.registry.factory(n) for n in ("needs_tools",)},
                                     "ghost": "probes.no_such_probe_module"})
    results = (await runner.run(A.id, ["needs_tools", "ghost"])).rounds[0].results
    assert [(r.verdict, dict(r.details or {}).get("skipped")) for r in results][0] == ("inconclusive", "no tools")
    assert results[1].verdict == "error" and "cannot import" in results[1].details["error"]  # type: ignore[index]


async def test_reference_is_configured_or_a_local_engine_and_never_the_endpoint() -> None:
    script = Script()
    runner, _, _ = make_runner(script, A, B, LOCAL, references={"m": B.id})
    assert runner.reference_for(A) is B and runner.reference_for(B) is None
    runner, _, _ = make_runner(script, A, B, LOCAL)
    assert runner.reference_for(A) is LOCAL and runner.reference_for(LOCAL) is None
    await runner.run(A.id, ["fidelity"])
    ctx = script.seen[-1][1]
    assert ctx.client.endpoint is A and ctx.reference is not None and ctx.reference.endpoint is LOCAL


async def test_a_reference_with_the_same_template_is_used_and_the_check_is_reported() -> None:
    script = Script()
    runner, _, _ = make_runner(script, A, LOCAL)
    events: list[dict[str, Any]] = []
    report = await runner.run(A.id, ["fidelity"], emit=events.append)
    (check,) = [e for e in events if e["event"] == "template"]
    assert check["status"] == "same" and check["reference"] == LOCAL.id
    assert report.as_json()["template"]["status"] == "same"
    ctx = script.seen[-1][1]
    assert ctx.reference is not None and ctx.reference.endpoint is LOCAL


async def test_a_reference_that_renders_prompts_differently_is_not_compared_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The endpoint's own template adds a default system prompt (24 tokens) that the reference's lacks.
    monkeypatch.setitem(TEMPLATE_EXTRA, A.id, 24)
    script = Script({"fidelity": ["pass"]})
    runner, _, _ = make_runner(script, A, LOCAL)
    events: list[dict[str, Any]] = []
    report = await runner.run(A.id, ["fidelity", "logprob_drift"], emit=events.append)
    (check,) = [e for e in events if e["event"] == "template"]
    assert check["status"] == "differs" and "template differs" in check["reason"]
    assert [n for n, c in script.seen if c.reference is not None] == []  # judged on its own history
    for result in report.rounds[0].results:
        details = dict(result.details or {})
        assert details["reference"] is None and "template differs" in details["reference_skipped"]


# Both declare the shipped GGUF: one tokenizer, one chat template.
A_Q4 = make_endpoint("prov-a/m", "m", provider="prov-a", weights="Q4_1")
LOCAL_Q4 = replace(make_endpoint("local-0", "m", provider="local", weights="q4_1"), region="local")


async def test_rendering_unlike_a_reference_of_the_same_weights_makes_the_endpoint_suspect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same weights file carries one tokenizer and one template, so other prompt_tokens for the same
    messages are the endpoint's rendering (or its usage) departing from the model's: a failing
    `template` check, a reference disagreement (SUSPECT, re-checked in the confirmatory round, never
    demoting alone). Without it an endpoint that adds a token to its counts escaped every reference
    comparison and stayed HEALTHY."""
    monkeypatch.setitem(TEMPLATE_EXTRA, A_Q4.id, 1)
    script = Script()
    persistence = FakeRuns()
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4, persistence=persistence)
    report = await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    checks = [[r for r in rnd.results if r.probe == "template"] for rnd in report.rounds]
    assert [rnd.confirm for rnd in report.rounds] == [False, True]
    assert [[(r.verdict, r.grounds, r.effect) for r in c] for c in checks] == [[("fail", "reference", "suspect")]] * 2
    assert "template differs" in checks[0][0].details["reason"]  # type: ignore[index]
    # Fidelity (the endpoint against itself) confirms a template alarm; it passed here.
    assert [(name, ctx.confirm) for name, ctx in script.seen] == [("logprob_drift", False), ("fidelity", True)]
    assert health.state(A_Q4.id) == "suspect"
    assert "reference disagreement alone" in report.rounds[1].decision.reason
    script.verdicts["fidelity"] = ["fail"]
    await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert health.state(A_Q4.id) == "demoted"
    assert "confirmed independently by fidelity fail" in persistence.transitions[-1].reason


async def test_a_check_that_finds_the_same_rendering_is_no_evidence_and_unknown_weights_get_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A passing check says nothing of what the model writes: no result (it would count as quality
    evidence and clear alarms or count clean rounds while every probe errors)."""
    script = Script()
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    report = await runner.run(A_Q4.id, ["fidelity"])
    assert [(r.probe, r.verdict) for r in report.rounds[0].results] == [("fidelity", "pass")]
    assert script.seen[-1][1].template == "same"
    # Weights unknown: another template may be the provider's own right; judged on its history alone.
    monkeypatch.setitem(TEMPLATE_EXTRA, A.id, 24)
    runner, health, _ = make_runner(script, A, LOCAL)
    report = await runner.run(A.id, ["fidelity"])
    assert [r.probe for r in report.rounds[0].results] == ["fidelity"] and health.state(A.id) == "healthy"
    assert script.seen[-1][1].template == "differs"


DOWN = ProbeUnavailable("upstream 503")


async def test_rounds_whose_probes_all_error_neither_clear_an_alarm_nor_count_as_clean() -> None:
    script = Script({"logprob_drift": ["fail", DOWN], "distribution": [DOWN], "fidelity": [DOWN]})
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert health.state(A_Q4.id) == "suspect"
    script.verdicts = {"logprob_drift": ["fail"], "distribution": ["fail"]}
    await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert health.state(A_Q4.id) == "demoted"
    script.verdicts = {"logprob_drift": [DOWN], "distribution": [DOWN], "fidelity": [DOWN]}
    for _ in range(3):
        await runner.run(A_Q4.id, ["logprob_drift", "distribution", "fidelity"])
    assert health.state(A_Q4.id) == "demoted"


class CheckAnswers(FakeClient):
    """The endpoint answers the template check's fixed messages its own way (`mode`), from the
    `after`-th of them on; everything else as FakeClient."""

    mode = ""
    after = 0
    seen = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        mine = self.endpoint.id == A_Q4.id and body["messages"] in list(TEMPLATE_MESSAGES)
        if mine:
            CheckAnswers.seen += 1
        if mine and CheckAnswers.seen > CheckAnswers.after:
            if CheckAnswers.mode == "down":
                self.errors += 1
                raise ProbeUnavailable("503")
            out = await super().chat(body)
            if CheckAnswers.mode == "no_usage":
                out.pop("usage")
            elif CheckAnswers.mode == "one_more":
                out["usage"]["prompt_tokens"] += 1
            return out
        return await super().chat(body)


def hostile_check(monkeypatch: pytest.MonkeyPatch, mode: str, after: int = 0) -> None:
    monkeypatch.setattr(CheckAnswers, "mode", mode)
    monkeypatch.setattr(CheckAnswers, "after", after)
    monkeypatch.setattr(CheckAnswers, "seen", 0)


async def test_answers_without_counts_where_the_reference_counts_leave_the_rendering_unchecked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hostile_check(monkeypatch, "no_usage")
    runner, health, _ = make_runner(Script(), A_Q4, LOCAL_Q4)
    runner.client_factory = CheckAnswers  # type: ignore[assignment]
    report = await runner.run(A_Q4.id, ["distribution"], trigger="manual")
    (template,) = [r for r in report.rounds[0].results if r.probe == "template"]
    assert (template.verdict, template.grounds) == ("fail", "reference")
    assert "cannot be checked" in template.details["reason"]  # type: ignore[index]
    assert health.state(A_Q4.id) == "suspect"


async def test_a_check_the_endpoint_does_not_answer_is_an_availability_error(monkeypatch: pytest.MonkeyPatch) -> None:
    hostile_check(monkeypatch, "down")
    runner, health, _ = make_runner(Script(), A_Q4, LOCAL_Q4)
    runner.client_factory = CheckAnswers  # type: ignore[assignment]
    report = await runner.run(A_Q4.id, ["fidelity"], trigger="manual")
    (template,) = [r for r in report.rounds[0].results if r.probe == "template"]
    assert (template.verdict, template.errors) == ("error", 2) and health.state(A_Q4.id) == "healthy"


async def test_a_re_check_without_an_answer_leaves_the_template_alarm_standing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TEMPLATE_EXTRA, A_Q4.id, 1)
    hostile_check(monkeypatch, "down", after=2)  # the confirmatory re-check's two requests 503
    runner, health, _ = make_runner(Script(), A_Q4, LOCAL_Q4)
    runner.client_factory = CheckAnswers  # type: ignore[assignment]
    report = await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert [[(r.probe, r.verdict) for r in rnd.results if r.probe == "template"] for rnd in report.rounds] == [
        [("template", "fail")], [("template", "error")]]
    assert health.state(A_Q4.id) == "suspect"
    assert "awaiting a confirmatory verdict from template" in report.rounds[1].decision.reason


DIFFERS = TemplateCheck("differs", [9, 15], [8, 14], "template differs: one token more")


class ReferenceCheckDown(FakeClient):
    """The reference stops answering the template check's messages after its first two."""

    seen = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.endpoint.id == LOCAL_Q4.id and body["messages"] in list(TEMPLATE_MESSAGES):
            ReferenceCheckDown.seen += 1
            if ReferenceCheckDown.seen > 2:
                self.errors += 1
                raise ProbeUnavailable("503")
        return await super().chat(body)


@pytest.mark.parametrize("recheck", ["alike", "endpoint_down", "reference_down"])
async def test_a_re_check_nobody_answered_is_no_failed_re_run(monkeypatch: pytest.MonkeyPatch, recheck: str) -> None:
    """A template alarm, then a confirmatory round whose fidelity fails: SUSPECT with fidelity the next
    alarm. A re-check nobody answered must do no worse than one that renders alike (it demoted)."""
    script = Script({"fidelity": ["fail"]})
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    runner.check_template = _replay(DIFFERS, runner.check_template)  # type: ignore[method-assign]
    if recheck == "endpoint_down":
        hostile_check(monkeypatch, "down", after=0)
        runner.client_factory = CheckAnswers  # type: ignore[assignment]
    elif recheck == "reference_down":
        monkeypatch.setattr(ReferenceCheckDown, "seen", 2)
        runner.client_factory = ReferenceCheckDown  # type: ignore[assignment]
    await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert health.state(A_Q4.id) == "suspect"


async def test_an_alarm_stands_until_its_own_re_run_answers_whatever_else_passes() -> None:
    """Drift and the template check alarm; in the confirmatory round every probe errors and the
    re-check renders alike: the template alarm is cleared, drift's stands (it cleared both)."""
    script = Script({"logprob_drift": ["fail", DOWN], "distribution": [DOWN], "fidelity": [DOWN]},
                    grounds={"logprob_drift": "reference"})
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    runner.check_template = _replay(DIFFERS, runner.check_template)  # type: ignore[method-assign]
    report = await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert [r.verdict for r in report.rounds[1].results if r.probe == "template"] == ["pass"]
    assert health.state(A_Q4.id) == "suspect"
    assert report.rounds[1].decision.confirm_for == ("logprob_drift",)


class ReferenceRendersAnew(FakeClient):
    """The reference (not the endpoint) counts 24 more tokens after the audit-start check: its
    template changed mid-audit."""

    seen = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        out = await super().chat(body)
        if self.endpoint.id == LOCAL_Q4.id:
            if body["messages"] in list(TEMPLATE_MESSAGES):
                ReferenceRendersAnew.seen += 1
            if ReferenceRendersAnew.seen > 2:
                out["usage"]["prompt_tokens"] += 24
        return out


async def test_a_reference_whose_counts_moved_mid_audit_is_not_compared_with_in_the_confirmatory_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ReferenceRendersAnew, "seen", 0)
    script = Script({"logprob_drift": ["fail"]}, grounds={"logprob_drift": "reference"})
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    runner.client_factory = ReferenceRendersAnew  # type: ignore[assignment]
    await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    confirmatory = [(name, ctx.template, ctx.reference is not None) for name, ctx in script.seen if ctx.confirm]
    assert confirmatory and all(t == "differs" and not has_ref for _, t, has_ref in confirmatory)


async def test_a_re_check_that_renders_alike_clears_a_template_alarm() -> None:
    # The audit-start check met a tokenizer counting one more (every answer while MIXED is set);
    # the re-check's two are counted alike.
    MIXED[A_Q4.id] = (1, 1)
    try:
        runner, health, _ = make_runner(Script(), A_Q4, LOCAL_Q4)
        first = await runner.check_template(A_Q4, LOCAL_Q4)
    finally:
        del MIXED[A_Q4.id]
    assert first.status == "differs"
    runner.check_template = _replay(first, runner.check_template)  # type: ignore[method-assign]
    report = await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    assert [[(r.probe, r.verdict) for r in rnd.results if r.probe == "template"] for rnd in report.rounds] == [
        [("template", "fail")], [("template", "pass")]]
    assert health.state(A_Q4.id) == "healthy"


def _replay(first: Any, check: Any) -> Any:
    """The audit-start check answers `first`, later ones are real."""
    calls = {"n": 0}

    async def replay(endpoint: Endpoint, ref: Endpoint, **kw: Any) -> Any:
        calls["n"] += 1
        return first if calls["n"] == 1 else await check(endpoint, ref, **kw)

    return replay


async def test_a_re_check_that_differs_leaves_the_audit_start_comparison_with_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Which probes meet the reference is the audit-start check's to say: a re-check that turns to
    "differs" fails, and the confirmatory probes still compare with the reference."""
    hostile_check(monkeypatch, "one_more", after=2)
    script = Script({"logprob_drift": ["fail"], "distribution": ["fail"]},
                    grounds={"logprob_drift": "reference", "distribution": "reference"})
    runner, health, _ = make_runner(script, A_Q4, LOCAL_Q4)
    runner.client_factory = CheckAnswers  # type: ignore[assignment]
    report = await runner.run(A_Q4.id, ["logprob_drift"], trigger="manual")
    confirmatory = [(name, ctx.reference is not None) for name, ctx in script.seen if ctx.confirm]
    assert confirmatory and all(has_reference for _, has_reference in confirmatory)
    assert [r.verdict for r in report.rounds[1].results if r.probe == "template"] == ["fail"]


async def test_demoting_the_last_endpoint_of_a_model_warns_loudly(caplog: pytest.LogCaptureFixture) -> None:
    script = Script({"fidelity": ["fail"]})
    runner, health, _ = make_runner(script, A, B)
    with caplog.at_level(logging.WARNING, logger="gateway.probes"):
        await runner.run(A.id, ["fidelity"], trigger="manual")
        assert health.state(A.id) == "demoted"
        assert not [r for r in caplog.records if "FAILS OPEN" in r.getMessage()]  # B still serves
        await runner.run(B.id, ["fidelity"], trigger="manual")
    loud = [r for r in caplog.records if "FAILS OPEN" in r.getMessage()]
    assert len(loud) == 1 and "prov-b/m was the last routable endpoint of model m" in loud[0].getMessage()


async def test_operator_pins_are_left_alone() -> None:
    script = Script({"fidelity": ["fail"]})
    runner, health, _ = make_runner(script)
    await health.transition(A.id, "demoted", source="manual", reason="ops", at=1.0, operator=True)
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    assert health.get(A.id).manual and health.state(A.id) == "demoted" and report.rounds[0].transition is None


async def test_identical_prompts_counted_alike_add_a_passing_consistency_result() -> None:
    script = Script()
    runner, health, _ = make_runner(script, sends=10)
    report = await runner.run(A.id, ["logprob_drift", "fidelity"], trigger="manual")
    (check,) = [r for r in report.rounds[0].results if r.probe == "consistency"]
    assert (check.verdict, check.samples, check.grounds) == ("pass", 20, "self")
    assert check.details is not None and check.details["prompts"] == 2
    assert health.state(A.id) == "healthy" and len(report.rounds) == 1


async def test_a_share_of_answers_counted_by_another_tokenizer_is_confirmed_and_demotes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No probe fails; every 4th answer reports 13 more prompt tokens: the round's consistency
    check raises SUSPECT, its confirmatory round (drift and distribution, which repeat prompts)
    fails it again on the endpoint's own grounds, and the endpoint is DEMOTED."""
    monkeypatch.setitem(MIXED, A.id, (4, 13))
    script = Script()
    persistence = FakeRuns()
    runner, health, _ = make_runner(script, persistence=persistence, sends=20)
    events: list[dict[str, Any]] = []
    report = await runner.run(A.id, ["fidelity"], trigger="manual", emit=events.append)
    assert [(name, ctx.confirm) for name, ctx in script.seen] == [
        ("fidelity", False), ("logprob_drift", True), ("distribution", True)]
    first, confirm = ({r.probe: r for r in rnd.results} for rnd in report.rounds)
    assert first["consistency"].verdict == "fail" and first["fidelity"].verdict == "pass"
    assert confirm["consistency"].verdict == "fail" and confirm["consistency"].samples == 40
    assert first["consistency"].details is not None and first["consistency"].details["off_count"] == 5
    assert [(t.from_state, t.to_state) for t in persistence.transitions] == [("healthy", "suspect"), ("suspect", "demoted")]
    assert health.state(A.id) == "demoted" and "consistency fail" in persistence.transitions[-1].reason
    assert [e["probe"] for e in events if e["event"] == "result"] == [
        "fidelity", "consistency", "logprob_drift", "distribution", "consistency"]


async def test_the_consistency_check_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MIXED, A.id, (4, 13))
    script = Script()
    runner, health, _ = make_runner(script, sends=20, consistency={"enabled": False})
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    assert [r.probe for r in report.rounds[0].results] == ["fidelity"] and health.state(A.id) == "healthy"


async def test_the_consistency_check_runs_off_the_event_loop_and_a_bug_in_it_is_an_error_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding: the check ran on the event loop (its first scipy import took about a second)
    and was the only step of the round without a guard: a bug in it lost the round's decision."""
    from probes.consistency import UsageConsistency

    loop_thread = threading.get_ident()
    seen: list[int] = []

    def broken(self: Any, records: Any, settings: Any, *, confirm: bool) -> None:
        seen.append(threading.get_ident())
        raise KeyError("bug")

    monkeypatch.setattr(UsageConsistency, "judge", broken)
    script = Script()
    persistence = FakeRuns()
    runner, health, _ = make_runner(script, persistence=persistence, sends=10)
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    results = {r.probe: r for r in report.rounds[0].results}
    assert results["fidelity"].verdict == "pass"
    assert results["consistency"].verdict == "error" and "KeyError" in results["consistency"].details["error"]
    assert seen and seen[0] != loop_thread
    assert health.state(A.id) == "healthy" and report.rounds[0].decision is not None


async def test_an_alarm_whose_check_no_longer_applies_is_cleared_by_a_passing_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a re-run that gave no verdict keeps an alarm open: a template alarm after the provider
    declares other weights (no comparison left to re-run) is not one, or the endpoint stays SUSPECT."""
    monkeypatch.setitem(TEMPLATE_EXTRA, A_Q4.id, 1)
    runner, health, _ = make_runner(Script(), A_Q4, LOCAL_Q4)
    await runner.run(A_Q4.id, ["fidelity"], trigger="manual")
    assert health.state(A_Q4.id) == "suspect"
    runner.catalog = make_catalog(make_endpoint("prov-a/m", "m", provider="prov-a", weights="Q8_0"), LOCAL_Q4)
    await runner.run(A_Q4.id, ["fidelity"], trigger="manual")
    assert health.state(A_Q4.id) == "healthy"


async def test_a_consistency_alarm_clears_when_the_re_run_repeats_no_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MIXED, A.id, (4, 13))
    script = Script()
    runner, health, _ = make_runner(script, A)
    runner.registry = ProbeRegistry({
        "logprob_drift": script.probe("logprob_drift", skip="no logprobs"),
        "distribution": script.probe("distribution", "confirm"),  # passes, repeats nothing
        "fidelity": script.probe("fidelity", sends=20),
    })
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    assert [r.probe for r in report.rounds[0].results if r.verdict == "fail"] == ["consistency"]
    # The confirmatory round (drift not applicable, distribution repeating nothing) has no
    # consistency result to give: the alarm cannot be re-run, and the passing round clears it.
    assert [r.probe for r in report.rounds[1].results] == ["logprob_drift", "distribution"]
    assert health.state(A.id) == "healthy"


async def test_a_llama_server_reference_evaluates_logprob_prompts_afresh() -> None:
    """Its T=0 logprobs moved with the cached prefix it reused (tests/providers/test_llamacpp_quirks.py):
    the references and the gateway's own (supervised) engines get `cache_prompt: false` on requests
    that read logprobs; an audited provider, even one on llama-server in a region called "local",
    gets its requests as a user's (nothing in them marks a probe), and so does every request that
    reads no logprobs (a multi-turn agent eval would pay its prompt again at every step)."""
    sent: dict[tuple[str, bool], dict[str, Any]] = {}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

    def upstream(request: Any) -> MockResponse:
        body = orjson.loads(request.body)
        sent[(request.url.split("//")[1].split(".")[0], bool(body.get("logprobs")))] = body
        return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(answer))

    def on(name: str, kind: str, region: str = "test", ready: Any = None) -> Endpoint:
        ep = make_endpoint(f"{name}/m", base_url=f"http://{name}.test/v1", adapter=LlamaCppAdapter(), ready=ready)
        return replace(ep, kind=kind, region=region)

    settings = ProbeSettings(references={"m": "ref/m"})
    factory = make_client_factory(MockHTTPClient(upstream), settings, ProbeBudget(requests_per_day=0, tokens_per_day=0,
                                                                                   clock=lambda: 0.0))
    endpoints = (on("ref", "llamacpp"), on("engine", "llamacpp", "local", ready=lambda: True),
                 on("provider", "llamacpp", "local"), on("other", "openai"))
    for ep in endpoints:
        client = factory(ep)
        assert client.fresh == (ep.id in ("ref/m", "engine/m"))
        for logprobs in (True, False):
            await client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "logprobs": logprobs})
    fresh = {key: body.get("cache_prompt") for key, body in sent.items()}
    assert fresh == {("ref", True): False, ("ref", False): None, ("engine", True): False, ("engine", False): None,
                     ("provider", True): None, ("provider", False): None, ("other", True): None, ("other", False): None}


async def test_a_confirmatory_round_runs_the_own_grounds_failures_first_and_whole_when_unsettled() -> None:
    """Drift failed against the reference, fidelity on the endpoint's own grounds: the confirmatory
    round re-runs fidelity first (it alone can settle the round); when it passes, the round runs
    on whole (drift's re-run against the reference settles nothing)."""
    script = Script({"logprob_drift": ["fail"], "fidelity": ["fail", "pass"]}, grounds={"logprob_drift": "reference"})
    runner, health, _ = make_runner(script)
    report = await runner.run(A.id, ["logprob_drift", "fidelity"], trigger="manual")
    assert [name for name, ctx in script.seen if ctx.confirm] == ["fidelity", "logprob_drift", "distribution"]
    assert not any("settled_by" in (r.details or {}) for r in report.rounds[1].results)
    assert health.state(A.id) == "suspect"
