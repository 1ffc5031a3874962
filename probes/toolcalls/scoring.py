"""Score a run of the tool-call suite and judge it against a reference self-run. Pure.

Figures (K2 Vendor Verifier style): schema accuracy = responses whose calls all validate / responses
with calls; trigger precision, recall and F1 of "the response called a tool" against the reference's
answer to the same case (or the case's expected behaviour); exact-argument match on the
deterministic cases. The error test: bad responses (any validator class but ok) against the
reference's rate (at least the configured baseline), one-sided binomial; Fisher's exact test
against the reference's counts is reported beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats

from probes.base import Grounds, Verdict
from probes.settings import ToolCallSettings
from probes.toolcalls.cases import Case, ExpectedCall
from probes.toolcalls.validator import SchemaCache, ToolSpec, calls_of, classify_response


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    case_id: str
    triggered: bool  # the response carries tool calls
    judged: bool  # not cut short by max_tokens
    schema_ok: bool  # every call parses, names a declared tool and validates
    bad: bool  # the validator flagged the response (bad call, leak, inconsistent finish)
    exact: bool | None  # deterministic cases: the calls equal the expected ones
    counts: Mapping[str, int]

    def stored(self) -> dict[str, Any]:
        """The compact form a reference run is frozen in (no content)."""
        return {"t": self.triggered, "j": self.judged, "s": self.schema_ok, "b": self.bad, "x": self.exact}

    @classmethod
    def from_stored(cls, case_id: str, data: Mapping[str, Any]) -> CaseOutcome:
        return cls(case_id, bool(data["t"]), bool(data["j"]), bool(data["s"]), bool(data["b"]), data.get("x"), {})


def _first_choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, Mapping) else {}


def _parsed_calls(response: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """The first choice's calls, arguments parsed (None where they are not JSON)."""
    message = _first_choice(response).get("message")
    out = []
    for name, arguments in calls_of(message if isinstance(message, Mapping) else {}):
        try:
            args = json.loads(arguments.strip() or "{}") if isinstance(arguments, str) else arguments
        except (ValueError, RecursionError):
            args = None
        out.append((name, args))
    return out


def exact_match(expected: Sequence[ExpectedCall], calls: Sequence[tuple[Any, Any]]) -> bool:
    """The same calls with the same arguments, in any order (Python equality: 100 == 100.0)."""
    left = list(calls)
    for want in expected:
        hit = next((i for i, (name, args) in enumerate(left) if name == want.name and args == want.arguments), None)
        if hit is None:
            return False
        del left[hit]
    return not left


def cut_early(case: Case, response: Mapping[str, Any]) -> bool:
    """finish_reason "length" with fewer completion tokens than the case's max_tokens: not the
    client's cut (the suite's prompts are far from any context window), so the answer is judged,
    and bad, instead of being left out where an endpoint could hide a broken call."""
    if _first_choice(response).get("finish_reason") != "length":
        return False
    usage = response.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    return type(tokens) is int and tokens < case.max_tokens


def outcome_of(case: Case, response: Mapping[str, Any], schemas: SchemaCache) -> CaseOutcome:
    if cut_early(case, response):  # judged, bad, and no exact match
        exact = None if case.expected is None else False
        return CaseOutcome(case.id, bool(_parsed_calls(response)), True, False, True, exact, {"finish_reason_mismatch": 1})
    report = classify_response(response, ToolSpec.from_request(case.request()), schemas)
    calls = _parsed_calls(response)
    first = report.choices[0] if report.choices else None
    schema_ok = bool(first and first.calls and all(c == "ok" for c in first.calls))
    exact = exact_match(case.expected, calls) if case.expected is not None else None
    return CaseOutcome(case.id, bool(calls), report.judged, schema_ok, report.bad, exact, dict(report.counts()))


@dataclass(frozen=True, slots=True)
class Figures:
    cases: int
    judged: int
    call_responses: int
    schema_ok: int
    bad: int
    tp: int
    fp: int
    fn: int
    tn: int
    deterministic: int
    exact: int

    @property
    def schema_accuracy(self) -> float | None:
        return self.schema_ok / self.call_responses if self.call_responses else None

    @property
    def error_rate(self) -> float | None:
        return self.bad / self.judged if self.judged else None

    @property
    def precision(self) -> float:
        if self.tp + self.fp:
            return self.tp / (self.tp + self.fp)
        return 1.0 if self.fn == 0 else 0.0

    @property
    def recall(self) -> float:
        if self.tp + self.fn:
            return self.tp / (self.tp + self.fn)
        return 1.0 if self.fp == 0 else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def exact_match(self) -> float | None:
        return self.exact / self.deterministic if self.deterministic else None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        for name in ("schema_accuracy", "error_rate", "precision", "recall", "f1", "exact_match"):
            out[name] = getattr(self, name)
        return out


def truth_of(expected: Mapping[str, bool], reference: Mapping[str, CaseOutcome]) -> dict[str, bool]:
    """Case id -> whether a call is right: the reference's answer where it was judged, else the
    case's expected behaviour (an answer max_tokens cut short says nothing either way)."""
    return {**expected, **{cid: o.triggered for cid, o in reference.items() if o.judged}}


def figures(outcomes: Iterable[CaseOutcome], truth: Mapping[str, bool]) -> Figures:
    """`truth`: case id -> whether a call is the right behaviour (the reference's, or expected)."""
    n = judged = calls = ok = bad = tp = fp = fn = tn = det = exact = 0
    for o in outcomes:
        n += 1
        if not o.judged:
            continue
        judged += 1
        bad += o.bad
        if o.triggered:
            calls += 1
            ok += o.schema_ok
        want = truth[o.case_id]
        tp += o.triggered and want
        fp += o.triggered and not want
        fn += want and not o.triggered
        tn += not want and not o.triggered
        if o.exact is not None:
            det += 1
            exact += o.exact
    return Figures(n, judged, calls, ok, bad, tp, fp, fn, tn, det, exact)


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    p_value: float | None
    demote: bool  # a missed schema pass mark under the hard floor (one the reference, if measured, meets)
    reasons: tuple[str, ...]
    details: Mapping[str, Any]
    # What a failure rests on (probes.base.Grounds): bad responses and the fixed floors are the
    # endpoint's own; pass marks taken from the reference's self-run (trigger F1, exact arguments,
    # its schema accuracy) are another engine's tool prompting, which an honest engine may not share.
    grounds: Grounds = "self"


def error_test(bad: int, n: int, null_rate: float) -> float:
    """One-sided binomial p-value of `bad` or more bad responses out of `n` at `null_rate`."""
    return float(stats.binom.sf(bad - 1, n, null_rate)) if n else 1.0


def judge(fig: Figures, ref: Figures | None, settings: ToolCallSettings, baseline_error: float) -> Judgement:
    """Fail on too many bad responses (p <= alpha) or on a pass mark missed with enough calls."""
    # "reference_figures": the runner names the reference endpoint "reference" in every probe's details.
    details: dict[str, Any] = {"figures": fig.as_dict(), "reference_figures": ref.as_dict() if ref else None}
    if fig.judged < settings.min_calls:
        return Judgement("inconclusive", None, False, (f"only {fig.judged} judged responses",), details)
    null_rate, null_source = baseline_error, "baseline"
    if ref is not None and ref.judged and ref.error_rate is not None:
        if ref.error_rate > baseline_error:  # an honest engine (the reference) errs this often
            null_rate, null_source = ref.error_rate, "reference"
        table = [[fig.bad, fig.judged - fig.bad], [ref.bad, ref.judged - ref.bad]]
        details["fisher_p"] = float(stats.fisher_exact(table, alternative="greater").pvalue)
    p = error_test(fig.bad, fig.judged, null_rate)
    # The error test is the endpoint's own, whatever else fails: the fleet's e-value reads it (probes.fleet).
    details.update(null_error_rate=null_rate, null_source=null_source, alpha=settings.alpha, self_p_value=p)
    reasons: list[str] = []
    own = False  # a reason on the endpoint's own grounds
    if p <= settings.alpha:
        reasons.append(f"{fig.bad} bad responses of {fig.judged} (p={p:.2g} at a rate of {null_rate:.2%})")
        own = True
    elif ref is not None and null_source == "reference" and ref.judged < settings.min_calls:
        # A rate from a few finished reference answers (1 bad of 1 is 100%) is a thin excuse: the
        # baseline still applies, and a failure only that rate excuses is a reference disagreement.
        p_base = error_test(fig.bad, fig.judged, baseline_error)
        details["baseline_p_value"] = p_base
        if p_base <= settings.alpha:
            reasons.append(f"{fig.bad} bad responses of {fig.judged} (p={p_base:.2g} at the {baseline_error:.2%} "
                           f"baseline; the reference's {null_rate:.0%} rests on {ref.judged} finished answers)")
    marks: dict[str, float] = {}
    enough_calls = fig.call_responses >= settings.min_calls
    schema = fig.schema_accuracy
    ref_schema = ref.schema_accuracy if ref is not None and ref.call_responses >= settings.min_calls else None
    marks["schema_accuracy"] = settings.schema_floor if ref_schema is None else ref_schema - settings.schema_margin
    # A fixed floor the reference itself misses (a model weak at tools, or a broken reference)
    # says nothing of the endpoint; being far worse than that reference still does.
    floor_holds = ref_schema is None or ref_schema >= settings.schema_floor
    hard_floor_holds = ref_schema is None or ref_schema >= settings.hard_floor
    schema_p = None  # the endpoint's schema misses against a reference below the floor (Fisher)
    if ref is not None and not floor_holds:
        table = [[fig.call_responses - fig.schema_ok, fig.schema_ok], [ref.call_responses - ref.schema_ok, ref.schema_ok]]
        schema_p = float(stats.fisher_exact(table, alternative="greater").pvalue)
        details.update(reference_below_floor=True, schema_fisher_p=schema_p)
    low_schema = enough_calls and schema is not None and schema < marks["schema_accuracy"]
    if low_schema and schema is not None:
        reasons.append(f"schema accuracy {schema:.1%} < pass mark {marks['schema_accuracy']:.1%}")
        own = own or (schema < settings.schema_floor if schema_p is None else schema_p <= settings.alpha)
    if ref is not None and ref.judged >= settings.min_calls:
        # The truth is the reference's own judged answers, so its F1 against itself is 1.
        marks["f1"] = 1.0 - settings.f1_margin
        if fig.f1 < marks["f1"]:
            reasons.append(f"trigger F1 {fig.f1:.3f} < pass mark {marks['f1']:.3f}")
        if fig.deterministic >= settings.min_calls and ref.exact_match is not None and fig.exact_match is not None:
            marks["exact_match"] = ref.exact_match - settings.exact_margin
            if fig.exact_match < marks["exact_match"]:
                reasons.append(f"exact-argument match {fig.exact_match:.1%} < pass mark {marks['exact_match']:.1%}")
    details["pass_marks"] = marks
    # The hard rule: below the floor, and a miss of the pass mark (so never on a pass), where the
    # reference meets that floor or has too few calls to measure.
    demote = low_schema and hard_floor_holds and schema is not None and schema < settings.hard_floor
    grounds: Grounds = "self" if own or demote or not reasons else "reference"
    return Judgement("fail" if reasons else "pass", p, demote, tuple(reasons), details, grounds)
