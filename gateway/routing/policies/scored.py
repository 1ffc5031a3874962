"""The gateway's policy: minimise the score (`gateway.routing.scoring`), then apply the guards.

1. Cold miss (no candidate holds any block of the prompt, and the prompt is cacheable): among the
   replicas of the best candidate's provider, the bounded-load consistent-hash home of the prefix
   family gets a bonus of `weights.home` of its own prefill times, so every gateway replica sends
   a new conversation to the same engine replica.
2. `provider.sort` ranks by price, latency or throughput first (ties by score).
3. Ties within `guards.tie_tolerance_s` of the best go to the larger predicted hit, then to
   configuration order (stable routing).
4. Imbalance override (SGLang): among slot-limited candidates, if the busiest has more than
   max(`imbalance_abs`, `imbalance_slots_frac` x slots) more in flight than the idlest and
   `imbalance_rel` times as many, the least loaded wins.
5. Stickiness break: nothing whose expected TTFT exceeds the best by `max_ttft_penalty_s`.
6. Exploration: with probability `guards.explore`, a random candidate goes first.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.catalog import Endpoint
from gateway.routing.decision import Decision, Scored
from gateway.routing.features import RequestFeatures
from gateway.routing.hashring import bounded_home
from gateway.routing.scoring import score_candidate
from gateway.routing.settings import RoutingConfig
from gateway.routing.snapshot import Snapshot

SORT_KEYS = {
    "price": lambda sc: sc.cost_usd,
    "latency": lambda sc: sc.ttft_s,
    "throughput": lambda sc: -sc.decode_tps,
}


def _apply_home(scored: list[Scored], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig) -> str | None:
    if not f.chain or any(sc.match_blocks for sc in scored):
        return None
    prompt = f.prompt_tokens
    # Among the replicas of the best candidate's provider (one cache domain, identical endpoints):
    # across different providers the scores decide on their merits.
    provider = min(scored, key=lambda sc: sc.score).endpoint.provider
    cacheable = {}
    for sc in scored:
        if sc.endpoint.provider != provider:
            continue
        profile = s.profile(sc.endpoint)
        if profile.capacity_tokens != 0 and prompt >= max(profile.min_tokens, 1):
            cacheable[sc.endpoint.id] = sc
    if len(cacheable) < 2:
        return None
    home = bounded_home(f.family, list(cacheable), s.inflight, cfg.guards.load_bound)
    if home is None:
        return None
    sc = cacheable[home]
    sc.home = -cfg.weights.home * sc.prefill_s * cfg.weights.ttft
    sc.score += sc.home
    return home


def _imbalanced(scored: list[Scored], cfg: RoutingConfig) -> Scored | None:
    pool = [sc for sc in scored if sc.endpoint.deployment.routing.slots is not None]
    if len(pool) < 2:
        return None
    loads = [sc.inflight for sc in pool]
    hi, lo = max(loads), min(loads)
    slots = min(sc.endpoint.deployment.routing.slots or 1 for sc in pool)
    gap = max(cfg.guards.imbalance_abs, cfg.guards.imbalance_slots_frac * slots)
    if hi - lo > gap and hi > cfg.guards.imbalance_rel * lo:
        return min(pool, key=lambda sc: (sc.inflight, sc.score))
    return None


def choose(
    candidates: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random
) -> Decision:
    if not candidates:
        return Decision("score", [])
    w = cfg.weights
    scored = [score_candidate(ep, f, s, w) for ep in candidates]
    if len(scored) == 1:
        return Decision("score", scored)
    home = _apply_home(scored, s, f, cfg)
    position = {sc.endpoint.id: i for i, sc in enumerate(scored)}
    sort_key = SORT_KEYS.get(f.prefs.sort or "")
    if sort_key is not None:
        ranked = sorted(scored, key=lambda sc: (sort_key(sc), sc.score, position[sc.endpoint.id]))
    else:
        ranked = sorted(scored, key=lambda sc: sc.score)
        best = ranked[0].score + cfg.guards.tie_tolerance_s
        tier = [sc for sc in ranked if sc.score <= best]
        if len(tier) > 1:
            # Among equals, the one holding more of the prompt, then configuration order.
            tier.sort(key=lambda sc: (-sc.hit_tokens, position[sc.endpoint.id]))
            ranked = tier + ranked[len(tier) :]
    guard = None
    pick = _imbalanced(ranked, cfg)
    if pick is not None and pick is not ranked[0]:
        guard = "imbalance"
    else:
        pick = ranked[0]
        fastest = min(ranked, key=lambda sc: sc.ttft_s)
        if pick.ttft_s > fastest.ttft_s + cfg.guards.max_ttft_penalty_s:
            pick, guard = fastest, "ttft_penalty"
    if cfg.guards.explore and len(ranked) > 1 and rng.random() < cfg.guards.explore:
        pick, guard = rng.choice(ranked), "explore"
    if pick is not ranked[0]:
        ranked.remove(pick)
        ranked.insert(0, pick)
    return Decision("score", ranked, guard=guard, home=home)
