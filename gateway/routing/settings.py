"""Routing and state-store settings: frozen values that `gateway.config.Settings` embeds.

Kept apart from `gateway.config` so the routing package owns its knobs; this module imports
nothing from the gateway, so `gateway.config` can import it without a cycle.

Units: seconds, tokens, US dollars. Score terms are "penalty seconds": lower is better, and
every weight converts its quantity into seconds of expected client wait (see `Weights`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kernel.frozen import Frozen

# The names `gateway.routing.policies.POLICIES` registers (a test keeps the two in step).
POLICY_NAMES = ("score", "round_robin", "least_loaded", "session_sticky", "config_order", "random")


class Weights(Frozen):
    """How each score term turns into penalty seconds."""

    # Seconds of penalty per US cent of expected request cost (1.0: a cent is worth a second).
    cost: float = Field(1.0, ge=0)
    # Per second of expected time to first token (prefill of the uncached part plus queueing).
    ttft: float = Field(1.0, ge=0)
    # Per second of prefill compute a request adds to a self-hosted endpoint (slots set): the
    # pool's cost of a cache miss, on top of this request's own TTFT.
    work: float = Field(1.0, ge=0)
    # Per second of expected generation time (expected output tokens / decode rate).
    decode: float = Field(0.25, ge=0)
    # Seconds per unit of utilisation (in-flight / slots): spreads load before queues form.
    load: float = Field(0.5, ge=0)
    # Exponent on the quality multiplier: the score is divided by quality ** weight.
    quality: float = Field(1.0, ge=0)
    # On a cold miss, the consistent-hash home gets this many of its own prefill times as a bonus,
    # so every gateway replica sends a new prefix to the same endpoint.
    home: float = Field(1.0, ge=0)
    # Self-hosted endpoints whose prefix cache is evicting: per second of prefill that eviction
    # puts at risk (this prompt, for its next turn, plus the tokens it writes over others'),
    # times the chance the cache drops them before their reuse (`scoring.evict_risk`).
    evict: float = Field(1.0, ge=0)
    # Typical seconds between a conversation's turns: a cache whose untouched blocks survive
    # this long is not over-committed (agent tool loops: seconds; chat: about a minute).
    reuse_s: float = Field(60.0, gt=0)


class Guards(Frozen):
    """Load guards that stop affinity from piling onto one replica."""

    # SGLang-style imbalance override over slot-limited (local) endpoints: when the most loaded has
    # more than `imbalance_abs` more requests in flight than the least loaded *and* `imbalance_rel`
    # times as many, pick the least loaded whatever the cache says.
    imbalance_abs: int = Field(2, ge=1)
    imbalance_rel: float = Field(1.5, ge=1)
    # ...and at least this fraction of the endpoints' slots (batched engines run dozens at once).
    imbalance_slots_frac: float = Field(0.5, ge=0)
    # Break stickiness: never pick an endpoint whose expected TTFT exceeds the best by this much.
    max_ttft_penalty_s: float = Field(5.0, gt=0)
    # Bounded-load consistent hashing: the home must carry at most this multiple of the mean load.
    load_bound: float = Field(1.25, ge=1)
    # Scores this close to the best count as a tie, broken by configuration order (stable routing).
    tie_tolerance_s: float = Field(0.005, ge=0)
    # Probability of trying a random allowed endpoint, to keep learning about the others.
    explore: float = Field(0.0, ge=0, le=1)


class AffinitySettings(Frozen):
    # Bytes of canonical (model, tools, messages) per hashed block: 512 bytes (about 128 tokens)
    # for the first `coarse_after_bytes`, then `coarse_block_bytes` (bench/routing_decision.py:
    # hashing is a call per block, so long histories in small blocks cost the most for the least).
    block_bytes: int = Field(512, ge=16, le=65536)
    coarse_after_bytes: int = Field(32768, ge=0)
    coarse_block_bytes: int = Field(2048, ge=16, le=1 << 20)
    # A cap on any endpoint's index, whatever its cache profile says.
    max_blocks_per_endpoint: int = Field(200_000, ge=1)
    # EMA weight of each observation of reported/predicted cached tokens (per endpoint).
    reliability_alpha: float = Field(0.2, gt=0, le=1)
    # The family key (consistent hashing, prompt_cache_key) covers at most this many bytes.
    family_bytes: int = Field(4096, ge=64)
    # Shard prompt_cache_key above this RPM per (key, family) on a replica: OpenAI overflows past ~15.
    shard_rpm: float = Field(15.0, gt=0)
    # The most shards of one family's prompt_cache_key (rounded down to a power of two).
    max_shards: int = Field(16, ge=1)
    # Memory for each conversation's last chain, so a new turn hashes only its new blocks (0: off).
    chain_cache_mb: int = Field(64, ge=0)

    @model_validator(mode="after")
    def _aligned(self) -> AffinitySettings:
        if self.coarse_after_bytes % self.block_bytes:
            raise ValueError("coarse_after_bytes must be a multiple of block_bytes")
        return self


class LatencySettings(Frozen):
    half_life_s: float = Field(300.0, gt=0)
    # Upper bounds (uncached prompt tokens) of the prompt-size bands; one more band above the last.
    bands: tuple[int, ...] = (512, 2048, 8192, 32768)
    # Pseudo-samples of the prior: how much evidence it takes to move away from it.
    prior_weight: float = Field(3.0, gt=0)

    @model_validator(mode="after")
    def _increasing(self) -> LatencySettings:
        if list(self.bands) != sorted(set(self.bands)) or not self.bands or self.bands[0] <= 0:
            raise ValueError("bands must be positive and strictly increasing")
        return self


class KeyPolicy(Frozen):
    """Per gateway key (by name): where its requests may go, and its own rate limits."""

    # Allowed endpoint regions; None allows any.
    regions: tuple[str, ...] | None = None
    # "deny": never route to a provider that may keep or train on prompts.
    data_collection: Literal["allow", "deny"] = "allow"
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)


class RoutingConfig(Frozen):
    # A policy name from `gateway.routing.policies.POLICIES`.
    policy: str = "score"
    weights: Weights = Weights()
    guards: Guards = Guards()
    affinity: AffinitySettings = AffinitySettings()
    latency: LatencySettings = LatencySettings()
    # Output tokens expected when the request sets no max_tokens (for cost and decode time).
    expected_output_tokens: int = Field(256, ge=1)
    # Sliding window of every RPM/TPM limit.
    rate_window_s: float = Field(60.0, gt=0)
    # Key name -> policy; keys not listed get `default_key`.
    keys: dict[str, KeyPolicy] = Field(default_factory=dict)
    default_key: KeyPolicy = KeyPolicy()
    # Send the `x-gateway-route` header (chosen endpoint and its top score terms).
    explain_header: bool = True

    @model_validator(mode="after")
    def _known_policy(self) -> RoutingConfig:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown routing policy {self.policy!r} (known: {', '.join(POLICY_NAMES)})")
        return self


class RetryConfig(Frozen):
    attempts_per_endpoint: int = Field(2, ge=1, le=10)
    max_attempts: int = Field(6, ge=1, le=50)
    backoff_base: float = Field(0.1, ge=0)
    backoff_max: float = Field(2.0, ge=0)
    # An upstream asking us to wait longer than this is skipped for the next candidate instead.
    max_retry_after: float = Field(5.0, ge=0)
    # The longest an upstream's Retry-After may block its endpoint (here and on every replica);
    # longer values are clamped, non-finite ones ignored.
    max_retry_after_block: float = Field(300.0, gt=0, allow_inf_nan=False)


class BreakerConfig(Frozen):
    window_seconds: float = Field(60.0, gt=0)
    min_requests: int = Field(5, ge=1)
    failure_rate: float = Field(0.5, gt=0, le=1)
    open_seconds: float = Field(30.0, gt=0)
    half_open_probes: int = Field(1, ge=1)
