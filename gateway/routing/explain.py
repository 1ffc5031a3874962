"""Explanations of a decision: the `x-gateway-route` header, a JSON document and a text table."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from gateway.routing.decision import TERMS, Decision, Scored, term_values

# Terms shown in the header, the largest first (by absolute value).
HEADER_TERMS = 3


def _num(value: float) -> str:
    return f"{value:.4g}"


def top_terms(scored: Scored, n: int = HEADER_TERMS) -> list[tuple[str, float]]:
    nonzero = [kv for kv in zip(TERMS, term_values(scored)) if kv[1]]
    nonzero.sort(key=_magnitude)
    return nonzero[:n]


def _magnitude(kv: tuple[str, float]) -> float:
    return -abs(kv[1])


def header(decision: Decision) -> str | None:
    """``<endpoint>; policy=score; score=0.41; ttft=0.31; cost=0.06; load=0.02; hit=0.87[; guard=..][; home]``,
    or ``<endpoint>; policy=score; sole`` when the model has one deployment (nothing was ranked)."""
    chosen = decision.chosen
    if chosen is None:
        return None
    out = f"{chosen.endpoint.id}; policy={decision.policy}"
    if chosen.scored:
        out += f"; score={chosen.score:.4g}"
        for name, value in top_terms(chosen):
            out += f"; {name}={value:.4g}"
        out += f"; hit={chosen.hit_tokens / chosen.prompt_tokens if chosen.prompt_tokens else 0.0:.2f}"
    if decision.sole:
        out += "; sole"
    if decision.guard:
        out += f"; guard={decision.guard}"
    if decision.home == chosen.endpoint.id:
        out += "; home"
    if decision.fail_open:
        out += f"; fail_open={decision.fail_open}"
    return out


def as_dict(decision: Decision) -> dict[str, Any]:
    return {
        "policy": decision.policy,
        "pick": decision.chosen.endpoint.id if decision.chosen else None,
        "guard": decision.guard,
        "home": decision.home,
        "fail_open": decision.fail_open,
        "ranked": [
            {
                "endpoint": sc.endpoint.id,
                "rank": i + 1,
                "score": round(sc.score, 6),
                "terms": {k: round(v, 6) for k, v in sc.terms.items()},
                "facts": {k: round(v, 6) for k, v in sc.facts.items()},
            }
            for i, sc in enumerate(decision.ranked)
        ],
        "filtered": [{"endpoint": f.endpoint.id, "reason": f.reason, "detail": f.detail} for f in decision.filtered],
    }


def table(decision: Decision, *, model: str, prompt_tokens: int, counted: bool) -> str:
    """A text table: every candidate with its rank and score terms, or why it was filtered out."""
    doc = as_dict(decision)
    names = [name for name in TERMS if any(name in r["terms"] for r in doc["ranked"])]
    lines = [
        (
            f"model {model}: {len(doc['ranked'])} candidate(s) ranked, {len(doc['filtered'])} filtered; "
            f"prompt {prompt_tokens} tokens ({'counted' if counted else 'estimated'}); policy {decision.policy}"
        )
    ]
    head = ["rank", "endpoint", "score", *names, "hit", "ttft_s", "cost_usd", "inflight"]
    rows = []
    for r in doc["ranked"]:
        f = r["facts"]
        rows.append(
            [
                str(r["rank"]),
                r["endpoint"],
                _num(r["score"]) if r["terms"] else "-",
                *[_num(r["terms"].get(k, 0.0)) for k in names],
                f"{f['hit_ratio']:.2f}" if "hit_ratio" in f else "-",
                _num(f["ttft_s"]) if "ttft_s" in f else "-",
                _num(f["cost_usd"]) if "cost_usd" in f else "-",
                _num(f.get("inflight", 0.0)),
            ]
        )
    for item in doc["filtered"]:
        rows.append(["-", item["endpoint"], f"filtered: {item['reason']} ({item['detail']})"])
    widths = [max(len(row[i]) for row in [head, *rows] if i < len(row)) for i in range(len(head))]
    for row in [head, *rows]:
        if len(row) == 3 and row[0] == "-" and row[2].startswith("filtered"):
            lines.append(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}")
        else:
            lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    pick = doc["pick"] or "none"
    extra = [f"guard {decision.guard}"] if decision.guard else []
    if decision.home:
        extra.append(f"home {decision.home}")
    if decision.fail_open:
        extra.append(f"fail open: {decision.fail_open}")
    lines.append(f"pick: {pick}" + (f" ({', '.join(extra)})" if extra else ""))
    scores = [r["score"] for r in doc["ranked"] if r["terms"]]
    if any(a > b for a, b in pairwise(scores)) and not decision.guard:
        lines.append("(not in score order: scores within guards.tie_tolerance_s of the best count as equal (larger cache hit, then config order), and provider.sort/order rank first)")
    return "\n".join(lines)
