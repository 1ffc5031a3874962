"""The `prompt_cache_key` the gateway sends: H(key name, prefix family), sharded when hot.

OpenAI routes a prompt-cache lookup by a hash of the first ~256 tokens plus `prompt_cache_key`.
Above ~15 requests a minute for one prefix+key, requests overflow to other machines and miss the
cache. So while a (key name, family) pair runs at most `shard_rpm`, its key is `gw-<hex>`; above
that it is split over n = the smallest power of two >= rate / shard_rpm shards (at most
`max_shards`), each shard staying under the overflow rate. Shard 0 keeps the plain `gw-<hex>`, so
when a family turns hot half of its conversations keep their key (and their warm cache); the
others become `gw-<hex>-s<i>`. The count of shards falls back only once the rate is clearly below
what they were added for (`SHRINK_MARGIN`), so a family hovering at the threshold does not flap.

The shard index is i = h mod n, where h names the conversation: the hash of the first chain block
beyond the family prefix (the same on every later turn, different between conversations of one
family), or the family hash when the chain has no such block (a first turn that is all family).
n is a power of two so that when it doubles, h mod 2n is h mod n or that + n: half of the
conversations keep their shard (and its warm cache).

Known limit: the rate is counted per gateway replica. Each replica sees only its share of the
traffic, so with R replicas sharding starts at about R x `shard_rpm` in total.

Memory is bounded: at most `max_families` pairs are tracked (least recently used out), and each
keeps at most the timestamps that tell its rate up to the one that calls for `max_shards`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from math import ceil

import xxhash

from gateway.routing.features import RequestFeatures

# RPM: requests over the last minute.
WINDOW_S = 60.0
# Fewer shards only when even this much more traffic would not need the current count.
SHRINK_MARGIN = 1.25
DEFAULT_MAX_FAMILIES = 10_000
_MASK64 = 0xFFFFFFFFFFFFFFFF
_hash = xxhash.xxh3_64_intdigest


def unsharded_key(f: RequestFeatures) -> int:
    """H(key name, family) as an int: distinct per tenant, the same for a conversation's turns."""
    return _hash((f.key_name or "-").encode(), f.family & _MASK64)


def conversation_hash(f: RequestFeatures) -> int:
    """What tells conversations of one family apart: the first chain block past the family."""
    chain = f.chain
    return chain[f.family_blocks] if len(chain) > f.family_blocks else f.family


def largest_power_of_two(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


class CacheKeySharder:
    """Counts requests per (key name, family) over a sliding minute and names their key."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        shard_rpm: float = 15.0,
        max_shards: int = 16,
        max_families: int = DEFAULT_MAX_FAMILIES,
    ) -> None:
        if shard_rpm <= 0 or max_shards < 1 or max_families < 1:
            raise ValueError("shard_rpm must be > 0, max_shards and max_families >= 1")
        self.clock = clock
        self.shard_rpm = shard_rpm
        # A power of two, so that the cap too is a doubling of the shards below it.
        self.max_shards = largest_power_of_two(max_shards)
        self.max_families = max_families
        # Past this many requests in the window the shard count is capped anyway: no need to keep more.
        self._max_timestamps = int(shard_rpm * self.max_shards) + 1
        # unsharded key -> its requests in the window and its shard count; LRU order.
        self._recent: OrderedDict[int, _Family] = OrderedDict()

    def __len__(self) -> int:
        """How many (key name, family) pairs are tracked."""
        return len(self._recent)

    def key_for(self, f: RequestFeatures) -> str:
        """The key for this request; counts it, so call it once per request that sends a key."""
        base = unsharded_key(f)
        family = self._observe(base)
        family.shards = self.next_shards(family.shards, len(family.recent))
        shard = conversation_hash(f) & (family.shards - 1)
        return f"gw-{base:016x}" if shard == 0 else f"gw-{base:016x}-s{shard}"

    def current_shards(self, f: RequestFeatures) -> int:
        """The shards of this request's family now (without counting a request)."""
        family = self._recent.get(unsharded_key(f))
        return family.shards if family is not None else 1

    def next_shards(self, current: int, rpm: float) -> int:
        """More shards at once when the rate needs them; fewer only past the shrink margin."""
        wanted = self.shards(rpm)
        if wanted >= current:
            return wanted
        return min(current, self.shards(rpm * SHRINK_MARGIN))

    def shards(self, rpm: float) -> int:
        """1 up to `shard_rpm`; above, the smallest power of two >= rpm / shard_rpm, capped."""
        if rpm <= self.shard_rpm:
            return 1
        needed = ceil(rpm / self.shard_rpm)
        return min(self.max_shards, 1 << (needed - 1).bit_length())

    def _observe(self, base: int) -> _Family:
        """Record one request of `base` now (its `recent` then holds the last minute's, this one too)."""
        now = self.clock()
        family = self._recent.get(base)
        if family is None:
            family = self._track(base)
        else:
            self._recent.move_to_end(base)
        recent = family.recent
        horizon = now - WINDOW_S
        while recent and recent[0] <= horizon:
            recent.popleft()
        recent.append(now)  # when full, drops the oldest: the count stays at the cap
        return family

    def _track(self, base: int) -> _Family:
        family = _Family(self._max_timestamps)
        self._recent[base] = family
        if len(self._recent) > self.max_families:
            self._recent.popitem(last=False)
        return family


class _Family:
    """One (key name, family): its request times over the last minute, and its shard count."""

    __slots__ = ("recent", "shards")

    def __init__(self, max_timestamps: int) -> None:
        self.recent: deque[float] = deque(maxlen=max_timestamps)
        self.shards = 1
