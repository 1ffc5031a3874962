"""The route stage: features -> filters -> policy -> admission -> the order dispatch tries.

Also the feedback seam: dispatch reports each attempt (`attempt_started/failed/committed`) and
the accountant reports the finished request (`finished`), which feed in-flight counts, latency
statistics, rate-limit token counts and the affinity index.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.catalog import Catalog, Endpoint
from gateway.routing import explain, preferences
from gateway.routing.cache_key import CacheKeySharder
from gateway.routing.decision import NOT_READY, SOFT_REASONS, Decision, Filtered, Scored
from gateway.routing.features import ChainCache, RequestFeatures, blocks_of, extract
from gateway.routing.filters import apply_filters
from gateway.routing.order import Ordering
from gateway.routing.policies import POLICIES, Policy
from gateway.routing.settings import KeyPolicy, RoutingConfig
from gateway.routing.shared import SharedState
from gateway.routing.tokens import TokenCounter, undecided
from kernel.errors import InvalidRequest

# What a hard filter reason means to the client: (param, code) of the 400.
HARD_ERRORS: dict[str, tuple[str, str]] = {
    "context_window": ("messages", "context_length_exceeded"),
    "mode": ("model", "unsupported_parameter"),
    "tools": ("tools", "unsupported_parameter"),
    "logprobs": ("logprobs", "unsupported_parameter"),
    "top_logprobs": ("top_logprobs", "unsupported_parameter"),
    "region": ("provider.region", "no_endpoint_matches"),
    "data_policy": ("provider.data_collection", "no_endpoint_matches"),
    "pref_only": ("provider.only", "no_endpoint_matches"),
    "pref_ignored": ("provider.ignore", "no_endpoint_matches"),
    "pref_order": ("provider.order", "no_endpoint_matches"),
    "max_price": ("provider.max_price", "no_endpoint_matches"),
    "require_parameters": ("provider.require_parameters", "no_endpoint_matches"),
}
# The fail-open label of each soft reason (the header `x-gateway-fail-open`).
FAIL_OPEN = {"breaker_open": "circuit_open", "retry_after": "circuit_open", "health_demoted": "health_demoted", "rate_limited": "rate_limited"}


@dataclass(slots=True)
class RouteTicket:
    """Per-request routing state, kept on the request context (`ctx.route`)."""

    features: RequestFeatures
    decision: Decision
    key_policy: KeyPolicy
    admitted_tokens: int
    # endpoint id -> (matched blocks, predicted hit tokens) at decision time.
    predicted: dict[str, tuple[int, int]] = field(default_factory=dict)
    endpoint: Endpoint | None = None
    attempt_start: float = 0.0
    prefill_pending: int = 0
    queued: bool = False
    deployment_tokens: int = 0
    committed_at: float | None = None
    ttft: float | None = None


class Router:
    def __init__(
        self,
        cfg: RoutingConfig,
        catalog: Catalog,
        shared: SharedState,
        *,
        clock: Callable[[], float] = time.perf_counter,
        rng: random.Random | None = None,
        counter: TokenCounter | None = None,
        policy: Policy | None = None,
        admit_keys: bool = True,
        key_policies: Callable[[str | None, KeyPolicy], KeyPolicy] | None = None,
    ) -> None:
        self.cfg = cfg
        self.catalog = catalog
        self.shared = shared
        self.clock = clock
        self.rng = rng or random.Random()
        self.counter = counter or TokenCounter()
        self.policy = policy or POLICIES[cfg.policy]
        self._names = {n for ep in catalog.endpoints for n in (ep.provider.lower(), ep.id.lower())}
        self.chains = ChainCache(cfg.affinity.chain_cache_mb << 20)
        self.blocks = blocks_of(cfg.affinity)
        self._takes_cache_key = frozenset(e for e, p in shared.profiles.items() if p.prompt_cache_key)
        # Whether route() enforces routing.keys' rpm/tpm itself (the app leaves it to gateway.limits).
        self.admit_keys = admit_keys
        # (key name, routing.keys' policy) -> the policy routing applies: the app narrows it by
        # the key's and its team's stored regions and data policy (gateway.limits).
        self.key_policies = key_policies
        self.cache_keys = CacheKeySharder(clock, shard_rpm=cfg.affinity.shard_rpm, max_shards=cfg.affinity.max_shards)

    # -- the decision -------------------------------------------------------------------

    def features(
        self,
        op: str,
        body: dict[str, Any],
        key_name: str | None,
        *,
        prefs: preferences.ProviderPreferences | None = None,
        hash_chain: bool = True,
    ) -> RequestFeatures:
        """`prefs`: the body's `provider` object as the request path parsed it (`ctx.prefs`); None
        parses it here (explain, probe traffic). `hash_chain=False` leaves the affinity chain empty
        (it only steers a choice of deployment and shards prompt_cache_key by conversation)."""
        if prefs is None:
            prefs = preferences.parse(body.get("provider"))
        if prefs.order or prefs.only or prefs.ignore:
            preferences.check_names(prefs, self._names)
        a = self.cfg.affinity
        key_policy = self.cfg.keys.get(key_name or "", self.cfg.default_key)
        if self.key_policies is not None:
            key_policy = self.key_policies(key_name, key_policy)
        return extract(
            op,
            body,
            blocks=self.blocks,
            family_bytes=a.family_bytes,
            expected_output_tokens=self.cfg.expected_output_tokens,
            prefs=prefs,
            key_policy=key_policy,
            key_name=key_name,
            chains=self.chains,
            hash_chain=hash_chain,
        )

    async def count_if_needed(self, f: RequestFeatures, body: dict[str, Any], candidates: Sequence[Endpoint]) -> None:
        """Tokenize only when the estimate cannot tell whether the prompt fits some candidate."""
        if f.op == "embeddings" or f.exact_prompt_tokens is not None:
            return
        out = f.max_output_tokens or 0
        if any(undecided(f.est_prompt_tokens, ep.deployment.context_window - out) for ep in candidates):
            f.exact_prompt_tokens = await self.counter.acount_body(f.op, body)

    def decide(
        self, candidates: Sequence[Endpoint], f: RequestFeatures, now: float | None = None, *, score_sole: bool = True
    ) -> Decision:
        """Filters and policy over the live snapshot (pure given the snapshot). When the request
        itself rules every candidate out, the decision is empty and `rejection` says why.
        `score_sole=False` (the request path): a model with one deployment still goes through the
        filters, but with nothing to rank it is not scored (`gwctl route explain` scores it)."""
        snapshot = self.shared.snapshot(now)
        kept, filtered = apply_filters(candidates, f, snapshot)
        if not kept:
            decision = self._fail_open(filtered)
        elif not score_sole and len(candidates) == 1:
            decision = Decision(self.cfg.policy, [Scored(kept[0], 0.0)], sole=True)
        else:
            decision = self.policy(kept, snapshot, f, self.cfg, self.rng)
        decision.filtered = filtered
        self._apply_order(decision, f)
        return decision

    def _fail_open(self, filtered: list[Filtered]) -> Decision:
        soft = [x for x in filtered if x.reason in SOFT_REASONS]
        if not soft:
            return Decision(self.cfg.policy, [])
        # Never remove the last endpoints silently: try them, the soonest unblocked first.
        breaker = self.shared.breaker
        soft.sort(key=lambda x: breaker.blocked_until(x.endpoint.id))
        ranked = [Scored(x.endpoint, float(i), inflight=float(self.shared.inflight(x.endpoint.id))) for i, x in enumerate(soft)]
        return Decision(self.cfg.policy, ranked, fail_open=FAIL_OPEN[soft[0].reason])

    @staticmethod
    def rejection(decision: Decision, f: RequestFeatures) -> InvalidRequest | None:
        """The 400 for a decision that the request's own constraints emptied (None if it is not
        empty, or if an endpoint is only starting: dispatch answers that with a 503)."""
        if decision.ranked or not decision.filtered or any(x.reason == NOT_READY for x in decision.filtered):
            return None
        first = decision.filtered[0]
        param, code = HARD_ERRORS.get(first.reason, ("model", "no_endpoint_matches"))
        reasons = "; ".join(f"{x.endpoint.id}: {x.reason} ({x.detail})" for x in decision.filtered)
        return InvalidRequest(f"No deployment of `{f.model}` can serve this request: {reasons}.", param=param, code=code)

    def _apply_order(self, decision: Decision, f: RequestFeatures) -> None:
        prefs = f.prefs
        if prefs.order:
            rank = {name: i for i, name in enumerate(prefs.order)}

            def position(sc: Scored) -> int:
                ep = sc.endpoint
                return min(rank.get(ep.provider.lower(), len(rank)), rank.get(ep.id.lower(), len(rank)))

            decision.ranked.sort(key=position)
        elif not prefs.allow_fallbacks:
            del decision.ranked[1:]

    async def route(self, ctx: Any, candidates: Sequence[Endpoint]) -> Ordering:
        """The pipeline stage: decide, admit the key's rate limit, and set up the attempt feedback."""
        # One deployment needs no chain, unless its prompt_cache_key shards by conversation.
        hash_chain = len(candidates) > 1 or candidates[0].id in self._takes_cache_key
        f = self.features(ctx.op, ctx.body, ctx.key_name, prefs=ctx.prefs, hash_chain=hash_chain)
        await self.count_if_needed(f, ctx.body, candidates)
        decision = self.decide(candidates, f, score_sole=False)
        rejected = self.rejection(decision, f)
        if rejected is not None:
            raise rejected
        admitted = f.prompt_tokens + (f.max_output_tokens or f.expected_output_tokens)
        if self.admit_keys:
            await self.shared.admit_key(f.key_name, f.key_policy, admitted)
        self.shared.next_sequence(f.model)
        ticket = RouteTicket(f, decision, f.key_policy, admitted)
        for sc in decision.ranked:
            ticket.predicted[sc.endpoint.id] = (sc.match_blocks, sc.hit_tokens)
        ctx.route = ticket
        if self.cfg.explain_header:
            ctx.route_header = explain.header(decision)
        endpoints = tuple(sc.endpoint for sc in decision.ranked)
        if f.family and "prompt_cache_key" not in ctx.body:
            keyed = [ep.id for ep in endpoints if ep.id in self._takes_cache_key]
            if keyed:
                # Counted only here, where a key is sent: the rate is what the upstream sees.
                extra = {"prompt_cache_key": self.cache_keys.key_for(f)}
                ctx.body_extra = {endpoint_id: extra for endpoint_id in keyed}
        return Ordering(endpoints, fail_open=decision.fail_open)

    def extra_for(self, op: str, body: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
        """What `route` adds to this body when it goes to `endpoint` (its prompt_cache_key): probe
        traffic, sent outside routing, gets it too, so that nothing tells it from a user's."""
        if endpoint.id not in self._takes_cache_key or "prompt_cache_key" in body:
            return {}
        f = self.features(op, body, None)
        return {"prompt_cache_key": self.cache_keys.key_for(f)} if f.family else {}

    # -- feedback from dispatch ---------------------------------------------------------

    # -- request feedback: a `gateway.pipeline.observe.RequestObserver`, a peer of the others ----

    events = ("attempt_started", "attempt_committed", "attempt_failed", "finished")

    def request_started(self, ctx: Any) -> None:
        return None

    def attempt_started(self, ctx: Any, endpoint: Endpoint, now: float) -> None:
        t: RouteTicket | None = getattr(ctx, "route", None)
        if t is None:
            return
        if t.endpoint is not None:
            self.attempt_failed(ctx, t.endpoint, now)
        f = t.features
        hit = t.predicted.get(endpoint.id, (0, 0))[1]
        slots = endpoint.deployment.routing.slots
        # Work admitted ahead of it: its TTFT will include a wait, not only the endpoint's own time.
        t.queued = slots is not None and (self.shared.inflight(endpoint.id) >= slots or self.shared.pending_prefill(endpoint.id) > 0)
        t.prefill_pending = max(0, f.prompt_tokens - hit)
        t.deployment_tokens = f.prompt_tokens + f.expected_output_tokens
        t.endpoint, t.attempt_start, t.committed_at, t.ttft = endpoint, now, None, None
        self.shared.started(endpoint, t.prefill_pending, t.deployment_tokens)

    def attempt_failed(self, ctx: Any, endpoint: Endpoint, now: float, error: BaseException | None = None) -> None:
        t: RouteTicket | None = getattr(ctx, "route", None)
        if t is None or t.endpoint is None or t.endpoint.id != endpoint.id:
            return
        if t.committed_at is not None:
            return  # a committed stream that broke: `finished` releases it (and learns nothing)
        self.shared.prefilled(endpoint.id, t.prefill_pending)
        self.shared.ended(endpoint.id)
        t.endpoint, t.prefill_pending = None, 0

    def attempt_committed(self, ctx: Any, endpoint: Endpoint, now: float) -> None:
        t: RouteTicket | None = getattr(ctx, "route", None)
        if t is None or t.endpoint is None or t.endpoint.id != endpoint.id:
            return
        self.shared.prefilled(endpoint.id, t.prefill_pending)
        t.prefill_pending = 0
        t.committed_at = now
        if t.features.chain:
            # The first token means the prompt is prefilled: the engine holds its blocks from now
            # on, and they take cache space while it decodes. Account for them in the index now,
            # not only when the answer ends, so its LRU fills (and evicts) as the engine's does.
            self.shared.affinity.insert(endpoint.id, t.features.chain, now)
        if ctx.stream:
            t.ttft = now - t.attempt_start

    def finished(self, ctx: Any, record: Any = None) -> None:
        """The request is over (answered, failed or cut): release it and learn from it."""
        t: RouteTicket | None = getattr(ctx, "route", None)
        if t is None or t.endpoint is None:
            return
        endpoint, now = t.endpoint, self.clock()
        self.shared.prefilled(endpoint.id, t.prefill_pending)
        self.shared.ended(endpoint.id)
        t.endpoint = None
        usage = ctx.usage
        f = t.features
        if usage is not None:
            actual = usage.prompt_tokens + usage.completion_tokens
            if self.admit_keys:
                self.shared.adjust_key_tokens(f.key_name, t.key_policy, actual - t.admitted_tokens)
            self.shared.adjust_deployment_tokens(endpoint.id, actual - t.deployment_tokens)
        if t.committed_at is None or ctx.status >= 400:
            return
        self._learn(t, endpoint, ctx, now)

    def _learn(self, t: RouteTicket, endpoint: Endpoint, ctx: Any, now: float) -> None:
        f = t.features
        usage = ctx.usage
        blocks, hit = t.predicted.get(endpoint.id, (0, 0))
        profile = self.shared.profiles.get(endpoint.id)
        reported = usage is not None and usage.cache_reported and (profile is None or profile.reports)
        prompt = usage.prompt_tokens if usage is not None and usage.prompt_tokens else f.prompt_tokens
        uncached = max(0, prompt - usage.cached_tokens) if reported and usage is not None else max(0, prompt - hit)
        completion = usage.completion_tokens if usage is not None else 0
        assert t.committed_at is not None
        summary = self.shared.latency.summary(endpoint.id)
        ttft: float | None
        weight = 1.0
        decode_tps = None
        if t.ttft is not None:
            ttft = t.ttft
            gen = now - t.committed_at
            if completion >= 8 and gen > 1e-3:
                decode_tps = completion / gen
        else:  # not streamed: only the whole latency is known; estimate its first-token part
            total = t.committed_at - t.attempt_start
            ttft = max(0.2 * total, total - completion / summary.decode_tps)
            weight = 0.5
        if t.queued:
            ttft = None  # waited behind other work: not the endpoint's own TTFT
        self.shared.latency.observe(endpoint.id, uncached, ttft, decode_tps, weight)
        if f.chain:
            cached_blocks = f.blocks_for_tokens(usage.cached_tokens, usage.prompt_tokens or None) if reported and usage is not None else None
            self.shared.learn_affinity(endpoint.id, f.chain, blocks, cached_blocks)
