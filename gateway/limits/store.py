"""Where limit counters live: the `LimitStore` contract and its in-memory backend (one replica;
the Redis backend, `redis_store`, is the same contract across replicas).

One `admit` checks every scope of a request (its key, then its team) and counts it in all of
them, or in none: requests and tokens in the sliding window (`state_store.window`), a slot among
the requests in flight (a lease that expires if a replica dies before settling), and the
worst-case cost against the period's spend counter. `settle` puts right what admission assumed:
the actual tokens, the slot back, and the actual cost instead of the worst case.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.state_store.window import BUCKETS, SlidingWindow, retry_after


@dataclass(frozen=True, slots=True)
class Charge:
    scope: str  # "key:<name>" | "team:<name>"
    rpm: int | None
    tpm: int | None
    max_parallel: int | None
    tokens: int
    budget_micro: int | None
    cost_micro: int
    period: str = "total"  # the budget period's id (policy.period_bounds)
    budget_ttl_s: float = 0.0  # the counter outlives its period by this much (0: no expiry)
    seed_micro: int = 0  # a missing counter starts here: the database's record of the period

    @property
    def rate(self) -> bool:
        return self.rpm is not None or self.tpm is not None


@dataclass(slots=True)
class ScopeUsage:
    requests: int = 0  # in the window (including this request when admitted)
    tokens: int = 0
    inflight: int = 0
    spent_micro: int = 0
    reset_requests: float = 0.0  # seconds until the window has room for one more request
    reset_tokens: float = 0.0


@dataclass(slots=True)
class Verdict:
    allowed: bool
    usage: list[ScopeUsage] = field(default_factory=list)  # per charge (up to the refusing one)
    failed: int = -1  # index of the charge that refused
    reason: str = ""  # requests | tokens | parallel | budget
    retry_after: float = 0.0


@dataclass(frozen=True, slots=True)
class Settlement:
    charge: Charge
    tokens_delta: int  # actual - admitted
    cost_delta_micro: int  # actual - worst case


class LimitStore(Protocol):
    name: str

    async def admit(self, request_id: str, charges: Sequence[Charge], window_s: float, lease_s: float) -> Verdict: ...

    async def settle(self, request_id: str, settlements: Sequence[Settlement], window_s: float) -> None: ...

    async def spend(self, items: Sequence[tuple[str, str]]) -> list[int | None]:
        """The live spend counter (micro-dollars) of each (scope, period); None where none exists."""
        ...

    async def aclose(self) -> None: ...


class MemoryLimitStore:
    """The same arithmetic as the Redis scripts, atomic because nothing in `admit` awaits."""

    name = "memory"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[str, SlidingWindow] = {}
        self._leases: dict[str, dict[str, float]] = {}  # scope -> request id -> lease end
        self._spend: dict[tuple[str, str], list[float]] = {}  # (scope, period) -> [micro, expires or 0]

    def _inflight(self, scope: str, now: float) -> dict[str, float]:
        leases = self._leases.setdefault(scope, {})
        for rid in [r for r, end in leases.items() if end <= now]:
            del leases[rid]
        return leases

    def _counter(self, c: Charge, now: float) -> list[float]:
        slot = (c.scope, c.period)
        counter = self._spend.get(slot)
        if counter is None or (counter[1] and counter[1] <= now):
            counter = self._spend[slot] = [c.seed_micro, now + c.budget_ttl_s if c.budget_ttl_s else 0.0]
        return counter

    async def admit(self, request_id: str, charges: Sequence[Charge], window_s: float, lease_s: float) -> Verdict:
        return self.admit_now(request_id, charges, window_s, lease_s)

    def admit_now(self, request_id: str, charges: Sequence[Charge], window_s: float, lease_s: float) -> Verdict:
        now = self._clock()
        width = window_s / BUCKETS
        usages = []
        for i, c in enumerate(charges):
            u = ScopeUsage()
            if c.rate:
                window = self._windows.setdefault(c.scope, SlidingWindow())
                u.requests, u.tokens = window.usage(now, window_s)
            if c.max_parallel is not None:
                u.inflight = len(self._inflight(c.scope, now))
            if c.budget_micro is not None:
                u.spent_micro = int(self._counter(c, now)[0])
            reason = _refusal(c, u)
            usages.append(u)
            if reason:
                wait = 1.0
                if reason in ("requests", "tokens"):
                    buckets = self._windows[c.scope].buckets
                    u.reset_requests = retry_after(buckets, now, width, c.rpm, None, 0)
                    u.reset_tokens = retry_after(buckets, now, width, None, c.tpm, c.tokens) if c.tpm else 0.0
                    wait = u.reset_requests if reason == "requests" else u.reset_tokens
                elif reason == "parallel":
                    wait = max(0.0, min(self._leases[c.scope].values()) - now) if self._leases[c.scope] else 1.0
                    wait = min(wait, 1.0)  # slots free on settlement, mostly long before the lease ends
                return Verdict(False, usages, i, reason, wait)
        for c, u in zip(charges, usages):
            if c.rate:
                self._windows[c.scope].add(now, window_s, 1, c.tokens)
                u.requests += 1
                u.tokens += c.tokens
            if c.max_parallel is not None:
                self._leases[c.scope][request_id] = now + lease_s
                u.inflight += 1
            if c.budget_micro is not None:
                self._counter(c, now)[0] += c.cost_micro
                u.spent_micro += c.cost_micro
        return Verdict(True, usages)

    async def settle(self, request_id: str, settlements: Sequence[Settlement], window_s: float) -> None:
        self.settle_now(request_id, settlements, window_s)

    def settle_now(self, request_id: str, settlements: Sequence[Settlement], window_s: float) -> None:
        now = self._clock()
        for s in settlements:
            c = s.charge
            if c.rate and s.tokens_delta:
                self._windows.setdefault(c.scope, SlidingWindow()).add(now, window_s, 0, s.tokens_delta)
            if c.max_parallel is not None:
                self._leases.get(c.scope, {}).pop(request_id, None)
            if c.budget_micro is not None and s.cost_delta_micro:
                counter = self._spend.get((c.scope, c.period))
                if counter is not None:
                    counter[0] += s.cost_delta_micro

    async def spend(self, items: Sequence[tuple[str, str]]) -> list[int | None]:
        now = self._clock()
        out: list[int | None] = []
        for slot in items:
            counter = self._spend.get(slot)
            out.append(None if counter is None or (counter[1] and counter[1] <= now) else int(counter[0]))
        return out

    async def aclose(self) -> None:
        return None


def _refusal(c: Charge, u: ScopeUsage) -> str:
    if c.rpm is not None and u.requests + 1 > c.rpm:
        return "requests"
    if c.tpm is not None and u.tokens + c.tokens > c.tpm:
        return "tokens"
    if c.max_parallel is not None and u.inflight + 1 > c.max_parallel:
        return "parallel"
    if c.budget_micro is not None and u.spent_micro + c.cost_micro > c.budget_micro:
        return "budget"
    return ""
