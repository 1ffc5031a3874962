"""The in-memory backend: the default for one gateway process. Same contract as Redis; several
`SharedState`s may share one instance in a process (how the tests model replicas without Redis)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import islice

from gateway.state_store.base import HEALTH_TTL_S, AffinityEntry, BreakerShared, RateResult
from gateway.state_store.window import SlidingWindow

# Latency vectors nobody updated for this many half-lives carry no weight: drop them.
STALE_HALF_LIVES = 40
AFFINITY_LOG_MAX = 100_000
KV_SWEEP_MIN = 1024


class MemoryStore:
    name = "memory"
    # In-process: no other gateway process reads it, so nothing needs publishing early.
    shared = False

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rates: dict[str, SlidingWindow] = {}
        self._breakers: dict[str, list[float]] = {}  # endpoint -> [open_until, blocked_until]
        self._inflight: dict[str, tuple[float, dict[str, tuple[int, int]]]] = {}
        self._latency: dict[str, tuple[float, dict[str, float]]] = {}
        self._log: deque[tuple[int, AffinityEntry]] = deque(maxlen=AFFINITY_LOG_MAX)
        self._seq = 0
        self._kv: dict[str, tuple[float, bytes]] = {}  # key -> (expires, value): probe evidence, responses
        self._kv_sweep_at = KV_SWEEP_MIN
        self._leases: dict[str, tuple[float, str]] = {}  # key -> (expires, owner): probe leases
        self._health: dict[str, tuple[float, tuple[float, float], bytes]] = {}  # endpoint -> (expires, version, record)
        self.closed = False

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True

    # -- rate limits ------------------------------------------------------------------

    async def rate_acquire(self, key: str, *, rpm: int | None, tpm: int | None, tokens: int, window_s: float) -> RateResult:
        return self._rates.setdefault(key, SlidingWindow()).acquire(self._clock(), window_s, rpm, tpm, tokens)

    async def rate_add(self, deltas: Mapping[str, tuple[int, int]], window_s: float) -> None:
        now = self._clock()
        for key, (requests, tokens) in deltas.items():
            self._rates.setdefault(key, SlidingWindow()).add(now, window_s, requests, tokens)

    async def rate_usage(self, keys: Sequence[str], window_s: float) -> dict[str, tuple[int, int]]:
        now = self._clock()
        return {k: self._rates[k].usage(now, window_s) if k in self._rates else (0, 0) for k in keys}

    # -- breaker ----------------------------------------------------------------------

    async def breaker_publish(self, endpoint: str, *, open_for: float | None, blocked_for: float) -> None:
        now = self._clock()
        state = self._breakers.setdefault(endpoint, [0.0, 0.0])
        if open_for is not None:
            state[0] = now + open_for if open_for > 0 else 0.0
        if blocked_for > 0:
            state[1] = max(state[1], now + blocked_for)
        if state[0] <= now and state[1] <= now:
            del self._breakers[endpoint]

    async def breaker_read(self, endpoints: Sequence[str]) -> dict[str, BreakerShared]:
        now = self._clock()
        out = {}
        for endpoint in endpoints:
            state = self._breakers.get(endpoint)
            if state is None:
                continue
            open_for, blocked_for = max(0.0, state[0] - now), max(0.0, state[1] - now)
            if open_for or blocked_for:
                out[endpoint] = BreakerShared(open_for, blocked_for)
        return out

    # -- in-flight --------------------------------------------------------------------

    async def inflight_report(self, replica: str, counts: Mapping[str, tuple[int, int]], ttl_s: float) -> None:
        self._inflight[replica] = (self._clock() + ttl_s, dict(counts))

    async def inflight_totals(self, exclude_replica: str) -> dict[str, tuple[int, int]]:
        now = self._clock()
        totals: dict[str, tuple[int, int]] = {}
        for replica, (expires, counts) in list(self._inflight.items()):
            if expires <= now:
                del self._inflight[replica]
                continue
            if replica == exclude_replica:
                continue
            for endpoint, (n, prefill) in counts.items():
                old = totals.get(endpoint, (0, 0))
                totals[endpoint] = (old[0] + n, old[1] + prefill)
        return totals

    # -- latency ----------------------------------------------------------------------

    def _decayed(self, endpoint: str, now: float, half_life_s: float) -> dict[str, float] | None:
        entry = self._latency.get(endpoint)
        if entry is None:
            return None
        at, fields = entry
        age = now - at
        if age > STALE_HALF_LIVES * half_life_s:
            del self._latency[endpoint]
            return None
        factor = 0.5 ** (age / half_life_s) if age > 0 else 1.0
        return {k: v * factor for k, v in fields.items()}

    async def latency_merge(self, deltas: Mapping[str, Mapping[str, float]], half_life_s: float) -> None:
        now = self._clock()
        for endpoint, delta in deltas.items():
            fields = self._decayed(endpoint, now, half_life_s) or {}
            for name, value in delta.items():
                fields[name] = fields.get(name, 0.0) + value
            self._latency[endpoint] = (now, fields)

    async def latency_read(self, endpoints: Sequence[str], half_life_s: float) -> dict[str, dict[str, float]]:
        now = self._clock()
        out = {}
        for endpoint in endpoints:
            fields = self._decayed(endpoint, now, half_life_s)
            if fields is not None:
                out[endpoint] = fields
        return out

    # -- affinity log -----------------------------------------------------------------

    async def affinity_publish(self, entries: Sequence[AffinityEntry]) -> None:
        for entry in entries:
            self._seq += 1
            self._log.append((self._seq, entry))

    async def affinity_read(self, cursor: str | None, limit: int) -> tuple[list[AffinityEntry], str]:
        if cursor is None:
            return [], str(self._seq)
        after = int(cursor)
        start = max(0, after - self._log[0][0] + 1) if self._log else 0
        picked = list(islice(self._log, start, start + limit))
        return [entry for _, entry in picked], str(picked[-1][0] if picked else max(after, 0))

    # -- health states ----------------------------------------------------------------

    async def health_publish(self, endpoint: str, version: tuple[float, float], record: bytes) -> bool:
        now = self._clock()
        held = self._health.get(endpoint)
        if held is not None and held[0] > now and held[1] > tuple(version):
            return False
        self._health[endpoint] = (now + HEALTH_TTL_S, (float(version[0]), float(version[1])), record)
        return True

    async def health_read(self) -> dict[str, bytes]:
        now = self._clock()
        for endpoint in [e for e, held in self._health.items() if held[0] <= now]:
            del self._health[endpoint]
        return {endpoint: held[2] for endpoint, held in self._health.items()}

    # -- key/value and leases (probes) ---------------------------------------------------

    async def kv_get(self, key: str) -> bytes | None:
        entry = self._kv.get(key)
        if entry is None or entry[0] <= self._clock():
            self._kv.pop(key, None)
            return None
        return entry[1]

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None:
        now = self._clock()
        if len(self._kv) >= self._kv_sweep_at:  # stored responses come in numbers: drop the expired
            self._kv = {k: v for k, v in self._kv.items() if v[0] > now}
            self._kv_sweep_at = max(KV_SWEEP_MIN, 2 * len(self._kv))
        self._kv[key] = (now + ttl_s, value)

    async def kv_delete(self, key: str) -> bool:
        entry = self._kv.pop(key, None)
        return entry is not None and entry[0] > self._clock()

    async def lease_acquire(self, key: str, owner: str, ttl_s: float) -> bool:
        """Take the lease if it is free or expired, or renew it if `owner` holds it; True when held."""
        now = self._clock()
        held = self._leases.get(key)
        if held is not None and held[0] > now and held[1] != owner:
            return False
        self._leases[key] = (now + ttl_s, owner)
        return True

    async def lease_release(self, key: str, owner: str) -> None:
        held = self._leases.get(key)
        if held is not None and held[1] == owner:
            del self._leases[key]
