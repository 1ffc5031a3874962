"""The KV-affinity index: which prompt prefixes each endpoint probably holds in its cache.

Per endpoint, an LRU of chain-block hashes with a TTL, bounded in tokens to the endpoint's cache.
A chain is inserted tail first, so within one endpoint a block is never more recent than its
ancestors: eviction takes tails before heads, expiry likewise, and the set stays prefix-closed.
That makes the longest cached prefix a binary search (about 11 lookups for 100k tokens) rather
than a walk. (A truncation that cuts a block shared by two chains can orphan the other chain's
tail; the next feedback on that chain removes it.)

Learning: on each answer, the reported cached tokens (`Usage.cached_tokens` when the endpoint
reports them) confirm the first blocks and truncate the rest of the prediction; an EMA of
reported/predicted per endpoint (`reliability`) discounts endpoints whose cache keeps less than
the index thinks. Then the whole prompt is inserted (it is in the cache now, tentatively).
Endpoints that report nothing (llama.cpp) learn from insertion alone, with the LRU sized to them.

Pressure: once an endpoint's LRU has had to evict, the age of its least recently used block
(`residence`) is how long an untouched prefix survives in that cache. Scoring compares it with the
gap between a conversation's turns (`Weights.reuse_s`) to tell over-committed caches apart.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.catalog import Endpoint
from gateway.routing.features import Blocks


@dataclass(frozen=True, slots=True)
class CacheProfile:
    """How an endpoint's prefix cache behaves, as routing models it."""

    ttl_s: float
    # Tokens of prefix the endpoint keeps; None: bounded by the index cap only.
    capacity_tokens: int | None
    # Below this many matching tokens the provider caches nothing; hits round down to `step`.
    min_tokens: int = 0
    step_tokens: int = 1
    reports: bool = True
    prompt_cache_key: bool = False


# Provider cache behaviour (research/kv_affinity.md, section 3).
CACHE_PROFILES: Mapping[str, CacheProfile] = {
    "none": CacheProfile(ttl_s=1.0, capacity_tokens=0, reports=False),
    "openai": CacheProfile(ttl_s=600.0, capacity_tokens=None, min_tokens=1024, step_tokens=128, prompt_cache_key=True),
    "anthropic": CacheProfile(ttl_s=300.0, capacity_tokens=None, min_tokens=1024),
    "deepseek": CacheProfile(ttl_s=3600.0, capacity_tokens=None, min_tokens=64, step_tokens=64),
    "gemini": CacheProfile(ttl_s=600.0, capacity_tokens=None, min_tokens=1024),
    # A self-hosted engine: LRU-bounded by its KV memory, reports only if configured to.
    "engine": CacheProfile(ttl_s=3600.0, capacity_tokens=65536, reports=True),
}

# Provider kind -> profile, for `cache.kind: auto`.
KIND_PROFILES: Mapping[str, str] = {
    "openai": "openai",
    "deepseek": "deepseek",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "together": "openai",
    "fireworks": "openai",
    "deepinfra": "openai",
    "groq": "openai",
    "openrouter": "openai",
    "vllm": "engine",
    "sglang": "engine",
    "ollama": "engine",
    "llamacpp": "engine",
}

# llama-server's prefix cache is its slots' KV (each slot keeps its last prompt) plus a RAM cache
# of saved slot states; it reports `cached_tokens` in every answer. Supervised engines set the
# capacity from their slots (gateway.engines.engine_routing).
_LLAMACPP = CacheProfile(ttl_s=3600.0, capacity_tokens=8192, reports=True)


def profile_for(endpoint: Endpoint) -> CacheProfile:
    cfg = endpoint.deployment.routing.cache
    if cfg.kind == "auto":
        base = _LLAMACPP if endpoint.kind == "llamacpp" else CACHE_PROFILES[KIND_PROFILES.get(endpoint.kind, "none")]
    else:
        base = CACHE_PROFILES[cfg.kind]
    return CacheProfile(
        ttl_s=cfg.ttl_s if cfg.ttl_s is not None else base.ttl_s,
        capacity_tokens=cfg.capacity_tokens if cfg.capacity_tokens is not None else base.capacity_tokens,
        min_tokens=cfg.min_tokens if cfg.min_tokens is not None else base.min_tokens,
        step_tokens=cfg.step_tokens if cfg.step_tokens is not None else base.step_tokens,
        reports=cfg.reports if cfg.reports is not None else base.reports,
        prompt_cache_key=cfg.prompt_cache_key if cfg.prompt_cache_key is not None else base.prompt_cache_key,
    )


def predicted_hit(matched_tokens: int, reliability: float, profile: CacheProfile) -> int:
    """Tokens the endpoint is expected to serve from cache: the match, discounted by what its
    reports have shown, zero below its minimum, rounded down to its step."""
    hit = int(matched_tokens * reliability)
    if hit < profile.min_tokens or hit <= 0:
        return 0
    return hit - hit % profile.step_tokens


class _EndpointIndex:
    __slots__ = ("capacity", "coarse", "evicting", "lru", "reliability", "tokens", "ttl")

    def __init__(self, capacity: int, ttl: float) -> None:
        self.lru: OrderedDict[int, float] = OrderedDict()
        self.capacity = capacity  # tokens
        self.tokens = 0
        self.coarse: set[int] = set()  # the blocks past the fine region (they hold more tokens)
        self.ttl = ttl
        self.reliability = 1.0
        self.evicting = False  # the LRU has filled up and dropped blocks: its head age is the residence


class AffinityIndex:
    """Block hashes per endpoint, bounded in tokens. Every method takes `now` (the app's
    monotonic clock)."""

    def __init__(self, *, blocks: Blocks, max_blocks: int, alpha: float) -> None:
        self._blocks = blocks
        self._fine_tokens = blocks.tokens(0)
        self._coarse_tokens = blocks.tokens(blocks.fine_blocks)
        self._max_tokens = max_blocks * self._fine_tokens
        self._alpha = alpha
        self._eps: dict[str, _EndpointIndex] = {}

    def configure(self, endpoint_id: str, profile: CacheProfile) -> None:
        capacity = self._max_tokens
        if profile.capacity_tokens is not None:
            capacity = min(capacity, profile.capacity_tokens)
        index = self._eps.get(endpoint_id)
        if index is None:
            self._eps[endpoint_id] = _EndpointIndex(capacity, profile.ttl_s)
        else:
            index.capacity, index.ttl = capacity, profile.ttl_s

    def _index(self, endpoint_id: str) -> _EndpointIndex:
        index = self._eps.get(endpoint_id)
        if index is None:
            index = self._eps[endpoint_id] = _EndpointIndex(self._max_tokens, CACHE_PROFILES["engine"].ttl_s)
        return index

    # -- reads (the decision path) ------------------------------------------------

    def match(self, endpoint_id: str, chain: list[int], now: float) -> int:
        """How many leading blocks of `chain` the endpoint holds (binary search, prefix-closed)."""
        index = self._eps.get(endpoint_id)
        if index is None or not chain or not index.lru:
            return 0
        get = index.lru.get
        horizon = now - index.ttl
        seen = get(chain[0])
        if seen is None or seen < horizon:
            return 0
        last = len(chain) - 1
        seen = get(chain[last])
        if seen is not None and seen >= horizon:
            return last + 1
        lo, hi = 0, last  # chain[lo] held, chain[hi] not
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            seen = get(chain[mid])
            if seen is not None and seen >= horizon:
                lo = mid
            else:
                hi = mid
        return lo + 1

    def reliability(self, endpoint_id: str) -> float:
        index = self._eps.get(endpoint_id)
        return index.reliability if index is not None else 1.0

    def size(self, endpoint_id: str) -> int:
        """Blocks held."""
        index = self._eps.get(endpoint_id)
        return len(index.lru) if index is not None else 0

    def held_tokens(self, endpoint_id: str) -> int:
        index = self._eps.get(endpoint_id)
        return index.tokens if index is not None else 0

    def residence(self, endpoint_id: str, now: float) -> float | None:
        """Seconds an untouched block survives in the endpoint's cache: the age of its least
        recently used block once the LRU has had to evict (None before: there is room)."""
        index = self._eps.get(endpoint_id)
        if index is None or not index.evicting or not index.lru:
            return None
        return min(index.ttl, max(0.0, now - next(iter(index.lru.values()))))

    # -- writes (after the answer) -----------------------------------------------

    def insert(self, endpoint_id: str, chain: list[int], now: float) -> None:
        """The endpoint now holds this prefix: touch it tail first, evict past capacity."""
        index = self._index(endpoint_id)
        if index.capacity <= 0:
            return
        lru = index.lru
        move = lru.move_to_end
        fine = self._blocks.fine_blocks
        added = 0
        for position in range(len(chain) - 1, -1, -1):
            block = chain[position]
            if block in lru:
                move(block)
            elif position >= fine:
                index.coarse.add(block)
                added += self._coarse_tokens
            else:
                added += self._fine_tokens
            lru[block] = now
        index.tokens += added
        if index.tokens > index.capacity:
            index.evicting = True
        while index.tokens > index.capacity and lru:
            self._drop(index, lru.popitem(last=False)[0])

    def _drop(self, index: _EndpointIndex, block: int) -> None:
        if block in index.coarse:
            index.coarse.discard(block)
            index.tokens -= self._coarse_tokens
        else:
            index.tokens -= self._fine_tokens

    def truncate(self, endpoint_id: str, blocks: Iterable[int]) -> None:
        index = self._eps.get(endpoint_id)
        if index is None:
            return
        pop = index.lru.pop
        for block in blocks:
            if pop(block, None) is not None:
                self._drop(index, block)

    def observe(self, endpoint_id: str, chain: list[int], predicted_blocks: int, cached_blocks: int | None, now: float) -> None:
        """Learn from an answer. `cached_blocks` is None when the endpoint reported nothing."""
        if cached_blocks is not None:
            index = self._index(endpoint_id)
            if predicted_blocks > 0:
                ratio = min(1.0, cached_blocks / predicted_blocks)
                index.reliability += self._alpha * (ratio - index.reliability)
            if cached_blocks < predicted_blocks:
                self.truncate(endpoint_id, chain[cached_blocks:predicted_blocks])
        self.insert(endpoint_id, chain, now)

    def forget(self, endpoint_id: str) -> None:
        index = self._eps.get(endpoint_id)
        if index is not None:
            index.lru.clear()
            index.coarse.clear()
            index.tokens = 0
            index.evicting = False
