"""What a routing decision is: the ranked candidates with their score terms, the filtered ones
with their reason codes, and the guard that overrode the scores, if any."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from gateway.catalog import Endpoint

# Filter reason codes (gateway.routing.filters). Hard: the request or the key rules the endpoint
# out, so it is never tried. Soft: the endpoint's state rules it out; when every candidate is out
# for soft reasons only, they are tried anyway (fail open) and the response says so.
HARD_REASONS = frozenset(
    {
        "mode",
        "tools",
        "logprobs",
        "top_logprobs",
        "context_window",
        "region",
        "data_policy",
        "pref_only",
        "pref_ignored",
        "pref_order",
        "max_price",
        "require_parameters",
    }
)
SOFT_REASONS = frozenset({"health_demoted", "breaker_open", "retry_after", "rate_limited"})
NOT_READY = "not_ready"
REASONS = HARD_REASONS | SOFT_REASONS | {NOT_READY}


@dataclass(frozen=True, slots=True)
class Filtered:
    endpoint: Endpoint
    reason: str
    detail: str = ""


TERMS = ("ttft", "queue", "work", "cost", "decode", "load", "quality", "home", "evict")
# A Scored's TERMS values as a tuple, in TERMS order (one C call: the header reads them per response).
term_values = attrgetter(*TERMS)


@dataclass(slots=True)
class Scored:
    """One ranked candidate. The score (lower is better) is the sum of the terms, each in penalty
    seconds; the facts are what the terms were computed from. Baseline policies fill only
    `inflight` and leave `scored` False."""

    endpoint: Endpoint
    score: float
    scored: bool = False
    # Terms.
    ttft: float = 0.0
    queue: float = 0.0
    work: float = 0.0
    cost: float = 0.0
    decode: float = 0.0
    load: float = 0.0
    quality: float = 0.0
    home: float = 0.0
    evict: float = 0.0
    # Facts.
    prompt_tokens: int = 0
    match_blocks: int = 0
    hit_tokens: int = 0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    cost_usd: float = 0.0
    decode_tps: float = 0.0
    inflight: float = 0.0
    quality_mult: float = 1.0

    @property
    def terms(self) -> dict[str, float]:
        if not self.scored:
            return {}
        return {name: value for name, value in zip(TERMS, term_values(self)) if name != "home" or value}

    @property
    def facts(self) -> dict[str, float]:
        if not self.scored:
            return {"inflight": self.inflight}
        return {
            "prompt_tokens": float(self.prompt_tokens),
            "match_blocks": float(self.match_blocks),
            "hit_tokens": float(self.hit_tokens),
            "hit_ratio": self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0,
            "ttft_s": self.ttft_s,
            "prefill_s": self.prefill_s,
            "cost_usd": self.cost_usd,
            "decode_tps": self.decode_tps,
            "inflight": self.inflight,
            "quality": self.quality_mult,
        }


@dataclass(slots=True)
class Decision:
    policy: str
    ranked: list[Scored]
    filtered: list[Filtered] = field(default_factory=list)
    # A load guard that overrode the best score: "imbalance", "ttft_penalty", "explore".
    guard: str | None = None
    # The consistent-hash home on a cold miss.
    home: str | None = None
    # Every candidate was ruled out for soft reasons and all are tried anyway.
    fail_open: str | None = None
    # The model has one deployment: nothing to rank, so it was not scored.
    sole: bool = False

    @property
    def chosen(self) -> Scored | None:
        return self.ranked[0] if self.ranked else None

    def reasons(self) -> dict[str, str]:
        return {f.endpoint.id: f.reason for f in self.filtered}
