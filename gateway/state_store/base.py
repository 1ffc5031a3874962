"""The state that gateway replicas share, behind one small async interface.

Two backends pass one contract suite (tests/gateway/state_store/test_contract.py): `memory`
(the default: one process, or several `MemoryStore` users in one process in tests) and `redis`
(replicas on several hosts). Every update is atomic on the store side (a Lua script or a single
command: no read-modify-write of whole objects) and every key expires.

Time: the store keeps its own clock (Redis: the server's TIME; memory: the injected clock), and
durations cross the interface as relative seconds (a TTL, "open for 12.5 s"), so replicas never
compare their clocks.

What it holds:
- sliding-window RPM/TPM counters (per key, per deployment): `rate_acquire` checks and counts
  atomically, `rate_add` adjusts the token count afterwards, `rate_usage` reads;
- breaker state per endpoint: "open for N s" and "blocked for N s" (upstream Retry-After);
- in-flight work per replica and endpoint (a replica's report expires with it);
- decaying latency statistics per endpoint (vectors of sums, merged by adding deltas);
- the affinity log: chain insertions and truncations, replayed by the other replicas;
- each endpoint's health state, kept only when it orders after the stored one (a version);
- small values and leases for the probes (their evidence; who runs a scheduled probe).

Any backend failure raises `StoreUnavailable`; callers keep serving on local state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class StoreUnavailable(Exception):
    """The store cannot be reached or failed; the message says why, in one line."""


class StoreRejected(StoreUnavailable):
    """The store answered but refused the values themselves (a count out of its integer range):
    retrying the same values cannot help, so the caller drops them."""


@dataclass(frozen=True, slots=True)
class RateResult:
    allowed: bool
    requests: int  # in the window, including this one when allowed
    tokens: int
    # Seconds until the window has room again (0 when allowed).
    retry_after: float = 0.0


@dataclass(frozen=True, slots=True)
class BreakerShared:
    open_for: float  # seconds the breaker stays open (0: not open)
    blocked_for: float  # seconds the upstream asked us to wait (0: none)


@dataclass(frozen=True, slots=True)
class AffinityEntry:
    """One change to an endpoint's index: insert a chain, or truncate the given blocks."""

    replica: str
    endpoint: str
    op: str  # "insert" | "truncate"
    blocks: tuple[int, ...]


# A health record outlives a quiet week; replicas write theirs again after an outage.
HEALTH_TTL_S = 7 * 86_400.0


class StateStore(Protocol):
    name: str
    # False for a store only this process reads (nothing needs publishing early).
    shared: bool

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...

    # -- rate limits: sliding window of `window_s`, counted in buckets of `window_s / buckets`
    async def rate_acquire(
        self, key: str, *, rpm: int | None, tpm: int | None, tokens: int, window_s: float
    ) -> RateResult: ...

    async def rate_add(self, deltas: Mapping[str, tuple[int, int]], window_s: float) -> None:
        """Add (requests, tokens) to each key's current bucket, unconditionally (may be negative)."""
        ...

    async def rate_usage(self, keys: Sequence[str], window_s: float) -> dict[str, tuple[int, int]]: ...

    # -- breaker
    async def breaker_publish(self, endpoint: str, *, open_for: float | None, blocked_for: float) -> None:
        """open_for > 0 opens the breaker for so long, 0 closes it, None leaves it; blocked_for > 0
        blocks the endpoint at least that long (a longer block stands)."""
        ...

    async def breaker_read(self, endpoints: Sequence[str]) -> dict[str, BreakerShared]: ...

    # -- in-flight work
    async def inflight_report(
        self, replica: str, counts: Mapping[str, tuple[int, int]], ttl_s: float
    ) -> None:
        """This replica's (in-flight requests, pending prefill tokens) per endpoint; expires after ttl."""
        ...

    async def inflight_totals(self, exclude_replica: str) -> dict[str, tuple[int, int]]: ...

    # -- latency statistics
    async def latency_merge(self, deltas: Mapping[str, Mapping[str, float]], half_life_s: float) -> None: ...

    async def latency_read(self, endpoints: Sequence[str], half_life_s: float) -> dict[str, dict[str, float]]: ...

    # -- affinity log
    async def affinity_publish(self, entries: Sequence[AffinityEntry]) -> None: ...

    async def affinity_read(self, cursor: str | None, limit: int) -> tuple[list[AffinityEntry], str]:
        """Entries after `cursor` (None: only what comes from now on), and the new cursor."""
        ...

    # -- health states: one record per endpoint, ordered by a version
    async def health_publish(self, endpoint: str, version: tuple[float, float], record: bytes) -> bool:
        """Store `record` as the endpoint's unless the stored one has a later version (tuples
        compare in order; an equal version replaces it). True when stored."""
        ...

    async def health_read(self) -> dict[str, bytes]:
        """Every endpoint's stored record."""
        ...

    # -- small values with a TTL (probe evidence)
    async def kv_get(self, key: str) -> bytes | None: ...

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def kv_delete(self, key: str) -> bool:
        """Remove the value; True when there was one."""
        ...

    # -- leases (one holder at a time, until it releases or the TTL passes)
    async def lease_acquire(self, key: str, owner: str, ttl_s: float) -> bool:
        """Take the lease if it is free or expired, or renew it if `owner` holds it; True when held."""
        ...

    async def lease_release(self, key: str, owner: str) -> None:
        """Give the lease up, only if `owner` still holds it."""
        ...


def rate_key(kind: str, name: str) -> str:
    return f"{kind}:{name}"
