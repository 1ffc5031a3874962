"""Score terms for one candidate: expected cost, TTFT (prefill + queueing), decode time, load and
quality, in penalty seconds (`settings.Weights`). Pure: everything comes from the snapshot.

    hit    = predicted cached tokens (affinity match x reliability, provider minimum and step)
    u      = prompt tokens - hit                                   (tokens to prefill)
    ttft   = a + b*u from the latency model (band mean, shrunk to the fit)
    queue  = slot-limited (self-hosted) endpoints: the prefill admitted ahead of it, plus the
             decodes ahead when no slot is free
    work   = self-hosted endpoints: the prefill compute b*u, which every later request waits behind
    cost   = (u*input + hit*cached_input + E[out]*output) / 1e6    (USD, weighted per cent)
    decode = E[out] / decode rate
    load   = in-flight / slots, or the engine's KV usage if higher
    An engine that reports its load (llama-server's /metrics, /slots) also counts what this gateway
    cannot see: other gateways' requests and those waiting for a slot. In-flight is then the larger
    of the local count and the engine's running + waiting requests.
    evict  = self-hosted endpoints whose prefix cache is evicting: b*(prompt + u) x risk, where
             risk = max(0, 1 - residence / reuse_s) and residence is how long an untouched block
             survives there (the age of the index's LRU head). A conversation's next turn finds
             its prefix only if the cache keeps it for the gap between turns; over-committed
             caches (short residence) lose it, and every token written there evicts a live one.
             Steers new and re-placed conversations to caches with room; sticky turns stay.
    score  = (ttft + queue + work + evict + cost + decode + load) / quality**w   (quality: the excess)
"""

from __future__ import annotations

from gateway.catalog import Endpoint
from gateway.routing.affinity import predicted_hit
from gateway.routing.decision import Scored
from gateway.routing.features import RequestFeatures
from gateway.routing.settings import Weights
from gateway.routing.snapshot import Snapshot

# Utilisation of an elastic (cloud) endpoint is in-flight / this.
CLOUD_SLOTS = 64.0


def evict_risk(residence: float | None, w: Weights) -> float:
    """The chance that a cache whose untouched blocks survive `residence` seconds drops a prefix
    before its next use, `w.reuse_s` later on average (linear: certain at 0, none at reuse_s)."""
    if residence is None:
        return 0.0  # the cache has room: nothing is being evicted
    return max(0.0, 1.0 - residence / w.reuse_s)


def score_candidate(ep: Endpoint, f: RequestFeatures, s: Snapshot, w: Weights) -> Scored:
    prompt = f.prompt_tokens
    eid = ep.id
    static = s.static(ep)
    blocks = s.match(eid, f.chain) if f.chain else 0
    hit = predicted_hit(f.matched_tokens(blocks), s.reliability(eid), static.profile) if blocks else 0
    uncached = prompt - hit
    lat = s.latency(eid)
    ttft = lat.ttft(uncached)
    slots = static.slots
    inflight = s.inflight(eid)
    kv_usage = 0.0
    if slots is not None and (report := s.reported_load(ep)) is not None:
        inflight = max(inflight, float(report.processing + report.deferred))
        kv_usage = report.kv_usage
    out = f.expected_output_tokens
    decode_s = out / lat.decode_tps if out else 0.0
    queue = 0.0
    if slots is not None:
        # Prefill work admitted ahead of this request, then a wait for a slot if none is free.
        queue = s.pending_prefill(eid) * lat.b
        if inflight >= slots:
            queue += (inflight - slots + 1) * decode_s / slots
    cost_usd = (uncached * static.price_in + hit * static.price_cached + out * static.price_out) / 1e6
    t_ttft, t_queue = w.ttft * ttft, w.ttft * queue
    # Self-hosted prefill is compute every later request waits behind: cache misses cost the pool.
    t_work = w.work * lat.b * uncached if slots is not None else 0.0
    t_evict = 0.0
    if slots is not None and w.evict:
        # At stake in an over-committed cache: the prompt its next turn comes back for, and as
        # many of other conversations' tokens as it writes (u), which its blocks push out.
        t_evict = w.evict * evict_risk(s.residence(eid), w) * lat.b * (prompt + uncached)
    t_cost, t_decode = w.cost * cost_usd * 100.0, w.decode * decode_s
    t_load = w.load * max(inflight / (slots if slots is not None else CLOUD_SLOTS), kv_usage)
    base = t_ttft + t_queue + t_work + t_evict + t_cost + t_decode + t_load
    quality = s.quality(eid) * static.quality
    quality = max(quality, 1e-3)
    total = base / quality**w.quality if w.quality and quality != 1.0 else base
    return Scored(  # positional, in field order: the decision path builds one per candidate
        ep,
        total,
        True,
        t_ttft,
        t_queue,
        t_work,
        t_cost,
        t_decode,
        t_load,
        total - base,
        0.0,
        t_evict,
        prompt,
        blocks,
        hit,
        ttft + queue,
        lat.b * uncached,
        cost_usd,
        lat.decode_tps,
        inflight,
        quality,
    )
