"""The limits stage: before dispatch, admit the request against its key's and its team's limits
and budgets (one atomic store call), and after the answer settle it (an observer of the
finished request). Neither touches the database: key records come from the config and from the
periodic refresh (`set_stored`), and spend is recorded by the request writer, off the hot path.

Budgets are charged the worst case at admission: the prompt estimate at the input price plus
max_tokens x the completions it may generate (without max_tokens, what the context window leaves) at the output price, at the
dearest endpoint the request may be dispatched to (dispatch may fall back). Settlement replaces it
with the actual cost, so a budget is never overspent by concurrent requests, on any replica.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gateway.catalog import Endpoint
from gateway.limits.errors import (
    KeyExpired,
    LimitsUnavailable,
    ModelNotAllowed,
    QuotaExceeded,
    openai_duration,
)
from gateway.limits.policy import (
    KeyRecord,
    Scope,
    allowed_regions,
    model_allowed,
    period_bounds,
    scope_from,
    to_micro,
)
from gateway.limits.settings import LimiterSettings
from gateway.limits.store import (
    Charge,
    LimitStore,
    MemoryLimitStore,
    ScopeUsage,
    Settlement,
    Verdict,
)
from gateway.pipeline.account import cost_usd
from gateway.pipeline.context import RequestContext
from gateway.pipeline.observe import RecordObserver
from gateway.pipeline.settings import Period
from gateway.routing.features import output_choices
from gateway.routing.settings import KeyPolicy
from gateway.state_store.base import StoreUnavailable
from gateway.state_store.window import BUCKETS
from kernel.deployment import Price
from kernel.errors import RateLimited

if TYPE_CHECKING:
    from kernel.records import RequestRecord

log = logging.getLogger("gateway.limits")

# A budget counter outlives its period by this much, so late settlements still land on it.
COUNTER_GRACE_S = 86_400.0
# Micro-dollar amounts stay below 2**53 (Lua numbers are doubles) and Redis's integer range: a
# budget is capped at $1e9, and a worst case above that is refused by any budget.
MAX_MICRO = 10**15
# A `total` budget's counter expires too (every key does); the database's record reseeds it.
TOTAL_TTL_S = 7 * 86_400.0


@dataclass(slots=True)
class Ticket:
    charges: list[Charge]
    store: LimitStore
    tokens: int
    cost_micro: int
    member: str


def config_records(settings: LimiterSettings) -> dict[str, KeyRecord]:
    """Config keys (auth.keys' limits, routing.keys' rpm/tpm) and their config teams."""
    teams = {name: scope_from("team", name, t) for name, t in settings.limits.teams.items()}
    out: dict[str, KeyRecord] = {}
    for k in settings.auth.keys:
        # routing.keys' limits (or routing.default_key's, as routing had it), where auth.keys sets none.
        policy = settings.routing.keys.get(k.name, settings.routing.default_key)
        scope = scope_from("key", k.name, k)
        scope = _with(scope, rpm=scope.rpm or policy.rpm, tpm=scope.tpm or policy.tpm)
        out[k.name] = KeyRecord(scope, teams.get(k.team) if k.team else None, dict(k.metadata))
    for name, policy in settings.routing.keys.items():  # a routing.keys name without an auth key
        if name not in out and (policy.rpm or policy.tpm):
            out[name] = KeyRecord(Scope("key", name, rpm=policy.rpm, tpm=policy.tpm))
    return out


def _with(scope: Scope, **changes: Any) -> Scope:
    return replace(scope, **changes)


class Limiter(RecordObserver):
    """The stage (`check`, then `admit` once routing has ranked the endpoints) and a request
    observer: `finished` settles what `admit` charged."""

    def __init__(
        self,
        settings: LimiterSettings,
        store: LimitStore,
        prices: Callable[[str], Price | None],
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        replica: str | None = None,
        regions: Iterable[str] = (),
    ) -> None:
        self.cfg = settings.limits
        self.window_s = settings.routing.rate_window_s
        self.store = store
        self.local = MemoryLimitStore(clock)  # "local" fallback while a shared store is away
        self._prices = prices
        self._wall = wall
        self._clock = clock
        self._config = config_records(settings)
        # routing.default_key's rpm/tpm: for every key without its own, each with its own counters.
        default = settings.routing.default_key
        self._default_rpm, self._default_tpm = default.rpm, default.tpm
        self._defaults: dict[str, KeyRecord] = {}
        self._stored: dict[str, KeyRecord] = {}
        self._regions = frozenset(r.lower() for r in regions)  # the catalog's: what patterns expand to
        self._steering: dict[str | None, tuple[KeyRecord, KeyPolicy, KeyPolicy]] = {}
        self._tickets: dict[int, Ticket] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._ids = itertools.count()
        self._replica = replica or f"{os.getpid()}-{id(self):x}"
        self._down_until = float("-inf")
        self._periods: dict[str, tuple[str, float, float | None]] = {}  # the current period of each kind
        self.store_error: str | None = None
        self.settle_failures = 0

    # -- records --------------------------------------------------------------------------

    def set_stored(self, records: Mapping[str, KeyRecord]) -> None:
        """The database's keys (name -> record), swapped in whole by the periodic refresh."""
        self._stored = {name: self._with_default(r) for name, r in records.items()}
        self._steering = {}

    @property
    def config_records(self) -> dict[str, KeyRecord]:
        return self._config

    def set_config_seeds(self, seeds: Mapping[str, tuple[str, float]]) -> None:
        """The recorded spend (period id, USD) of config keys and teams, by scope id."""
        self._config = {name: _seeded(r, seeds) for name, r in self._config.items()}

    def _with_default(self, r: KeyRecord) -> KeyRecord:
        key = r.key
        if (self._default_rpm or self._default_tpm) and key.rpm is None and key.tpm is None:
            return KeyRecord(_with(key, rpm=self._default_rpm, tpm=self._default_tpm), r.team, r.metadata)
        return r

    def record(self, key_name: str | None) -> KeyRecord | None:
        name = "-" if key_name is None else key_name  # "-": open access, as routing counted it
        found = self._config.get(name) or self._stored.get(name)
        if found is not None or not (self._default_rpm or self._default_tpm):
            return found
        default = self._defaults.get(name)
        if default is None:
            if len(self._defaults) >= 65_536:  # names of authenticated keys: few, but bounded anyway
                self._defaults.clear()
            default = self._defaults[name] = KeyRecord(Scope("key", name, rpm=self._default_rpm, tpm=self._default_tpm))
        return default

    def key_policy(self, key_name: str | None, base: KeyPolicy) -> KeyPolicy:
        """Where routing may send this key's requests: `base` (routing.keys' policy of the name)
        narrowed by the key's and its team's allowed regions and data policy, so the router's
        region and data-policy filters enforce them as they do routing.keys'. No I/O; remembered
        per key until the records change."""
        record = self.record(key_name)
        if record is None or not any(s.steers for s in record.scopes):
            return base
        known = self._steering.get(key_name)
        if known is not None and known[0] is record and known[1] is base:
            return known[2]
        lists = [tuple(r.lower() for r in base.regions) if base.regions is not None else None]
        lists += [s.allowed_regions for s in record.scopes]
        deny = base.data_collection == "deny" or any(s.data_collection == "deny" for s in record.scopes)
        policy = base.model_copy(
            update={"regions": allowed_regions(lists, self._regions), "data_collection": "deny" if deny else "allow"}
        )
        if len(self._steering) >= 65_536:
            self._steering.clear()
        self._steering[key_name] = (record, base, policy)
        return policy

    # -- the stage --------------------------------------------------------------------------

    def check_expiry(self, key_name: str | None) -> None:
        """Expiry of the key or its team (401 expired_api_key): the authenticator asks it on every
        route, so an expired key reads no stored response and lists no models either. No I/O."""
        record = self.record(key_name)
        if record is None:
            return
        now = None
        for scope in record.scopes:
            if scope.expires_at is not None:
                now = self._wall() if now is None else now
                if now >= scope.expires_at:
                    what = "The API key" if scope.kind == "key" else f"The team {scope.name!r} of this API key"
                    raise KeyExpired(f"{what} has expired.")

    def check(self, ctx: RequestContext) -> None:
        """Expiry (401) and allowed models (403): no I/O."""
        self.check_expiry(ctx.key_name)
        record = self.record(ctx.key_name)
        if record is None:
            return
        for scope in record.scopes:
            if not model_allowed(scope.allowed_models, ctx.model):
                who = f"key {ctx.key_name!r}" if scope.kind == "key" else f"team {scope.name!r}"
                raise ModelNotAllowed(
                    f"The {who} is not allowed to use the model `{ctx.model}`.", param="model"
                )

    async def admit(self, ctx: RequestContext, endpoints: Sequence[Endpoint]) -> None:
        record = self.record(ctx.key_name)
        if record is None or not any(s.limited for s in record.scopes):
            return
        tokens, cost = self._estimate(ctx, endpoints)
        now = self._wall()
        scopes = [s for s in record.scopes if s.limited]
        charges = [self._charge(s, tokens, cost, now) for s in scopes]
        member = f"{self._replica}:{next(self._ids)}"
        verdict, store = await self._admit(member, charges)
        if not verdict.allowed:
            raise self._refusal(verdict, scopes[verdict.failed], charges[verdict.failed], now)
        self._tickets[id(ctx)] = Ticket(charges, store, tokens, cost, member)
        if any(c.rate for c in charges):  # OpenAI sends them on every answer, not only on a 429
            ctx.rate_headers = self._admitted_headers(charges, verdict.usage, now)

    async def count_request(self, ctx: RequestContext) -> None:
        """A request that reaches no upstream (count_tokens) against its key's and team's rpm alone:
        no tokens, slot or cost, so nothing to settle."""
        record = self.record(ctx.key_name)
        scopes = [s for s in record.scopes if s.rpm is not None] if record is not None else []
        if not scopes:
            return
        now = self._wall()
        charges = [Charge(s.id, s.rpm, None, None, 0, None, 0) for s in scopes]
        verdict, _ = await self._admit(f"{self._replica}:{next(self._ids)}", charges)
        if not verdict.allowed:
            raise self._refusal(verdict, scopes[verdict.failed], charges[verdict.failed], now)

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        """Settle: actual tokens and cost instead of what admission assumed, and the slot back.
        Without usage, `ctx.usage` is the accountant's estimate from the output relayed (only a
        request never answered has none and costs nothing)."""
        ticket = self._tickets.pop(id(ctx), None)
        if ticket is None:
            return
        usage = ctx.usage
        price = self._prices(ctx.endpoint_id) if ctx.endpoint_id else None
        actual_cost = min(to_micro(cost_usd(usage, price)), MAX_MICRO) if usage is not None and price is not None else 0
        actual_tokens = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
        if ctx.usage_estimated:  # an estimate charges no more than was admitted; what the upstream counted, all
            counted = min(to_micro(cost_usd(ctx.usage_counted, price)), actual_cost) if price is not None else 0
            actual_cost = counted + min(actual_cost - counted, ticket.cost_micro)
        settlements = [Settlement(c, actual_tokens - ticket.tokens, actual_cost - ticket.cost_micro) for c in ticket.charges]
        if isinstance(ticket.store, MemoryLimitStore):  # in-process: settle now, no task
            ticket.store.settle_now(ticket.member, settlements, self.window_s)
            return
        task = asyncio.get_running_loop().create_task(self._settle(ticket, settlements))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _settle(self, ticket: Ticket, settlements: list[Settlement]) -> None:
        try:
            await ticket.store.settle(ticket.member, settlements, self.window_s)
        except StoreUnavailable as exc:
            # The slot's lease expires on its own; the worst-case charge stands (never an overspend).
            self.settle_failures += 1
            self._failed(exc)

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait for the settlements in flight."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout)

    async def aclose(self, timeout: float = 2.0) -> None:
        await self.flush(timeout)
        await self.store.aclose()

    # -- helpers ----------------------------------------------------------------------------

    def _estimate(self, ctx: RequestContext, endpoints: Sequence[Endpoint]) -> tuple[int, int]:
        f = getattr(ctx.route, "features", None)
        body = ctx.body
        prompt = f.prompt_tokens if f is not None else len(str(body)) // 4 + 1
        n = output_choices(ctx.op, body)  # n, and for completions best_of x each prompt of an array
        out = f.max_output_tokens if f is not None else None
        tokens = prompt + (f.expected_output_tokens if f is not None else 0)
        worst = 0.0
        for ep in endpoints:
            price = ep.deployment.price
            if ctx.op == "embeddings":
                completion = 0
            else:
                completion = (out if out is not None else max(0, ep.deployment.context_window - prompt)) * n
            worst = max(worst, (prompt * price.input + completion * price.output) / 1_000_000)
        return min(tokens, MAX_MICRO), min(to_micro(worst), MAX_MICRO + 1)

    def _charge(self, scope: Scope, tokens: int, cost: int, now: float) -> Charge:
        budget = min(to_micro(scope.budget_usd), MAX_MICRO) if scope.budget_usd is not None else None
        period, ttl, seed = "total", 0.0, 0
        if budget is not None:
            period, _, reset = self._period(scope.budget_period, now)
            ttl = (reset - now + COUNTER_GRACE_S) if reset is not None else TOTAL_TTL_S
            seed = min(to_micro(scope.spent_usd), MAX_MICRO) if scope.spent_period == period else 0
        return Charge(scope.id, scope.rpm, scope.tpm, scope.max_parallel, tokens, budget, cost, period, ttl, seed)

    def _period(self, period: Period, now: float) -> tuple[str, float, float | None]:
        """`period_bounds`, remembered until the period ends (it is date arithmetic)."""
        known = self._periods.get(period)
        if known is None or now < known[1] or (known[2] is not None and now >= known[2]):
            known = self._periods[period] = period_bounds(period, now)
        return known

    async def _admit(self, member: str, charges: list[Charge]) -> tuple[Verdict, LimitStore]:
        lease = self.cfg.parallel_lease_s
        if self._clock() >= self._down_until:
            try:
                verdict = await self._shielded(member, charges, lease)
                if self.store_error is not None:
                    log.warning("limits: the store %s answers again", self.store.name)
                    self.store_error = None
                return verdict, self.store
            except StoreUnavailable as exc:
                self._failed(exc)
        if self.cfg.on_store_failure == "closed":
            raise LimitsUnavailable(
                "The gateway cannot check this key's limits right now (its limit store is unavailable); retry shortly.",
                headers={"retry-after": str(max(1, math.ceil(self.cfg.retry_store_after_s)))},
            )
        return self.local.admit_now(member, charges, self.window_s, lease), self.local

    async def _shielded(self, member: str, charges: list[Charge], lease: float) -> Verdict:
        """The store call, finished even if the request is cancelled meanwhile (its client left):
        the script may already have counted it, so an admission nobody will settle is given back."""
        call = asyncio.ensure_future(self.store.admit(member, charges, self.window_s, lease))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(lambda done: self._give_back(done, member, charges))
            raise

    def _give_back(self, call: asyncio.Future[Verdict], member: str, charges: list[Charge]) -> None:
        if call.cancelled() or call.exception() is not None or not call.result().allowed:
            return
        ticket = Ticket(charges, self.store, charges[0].tokens, charges[0].cost_micro, member)
        refunds = [Settlement(c, -c.tokens, -c.cost_micro) for c in charges]
        task = asyncio.get_running_loop().create_task(self._settle(ticket, refunds))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _failed(self, exc: StoreUnavailable) -> None:
        if self.store_error is None:
            log.warning("limits: the store %s failed (%s); limits are %s until it answers", self.store.name, exc,
                      "refused (fail-closed)" if self.cfg.on_store_failure == "closed" else "counted on this replica only")
        self.store_error = str(exc)
        self._down_until = self._clock() + self.cfg.retry_store_after_s

    def _refusal(self, verdict: Verdict, scope: Scope, c: Charge, now: float) -> RateLimited:
        u = verdict.usage[verdict.failed]
        who = f"key {scope.name}" if scope.kind == "key" else f"team {scope.name}"
        if verdict.reason == "budget":
            _, _, reset = self._period(scope.budget_period, now)
            spent = u.spent_micro / 1e6
            budget = (c.budget_micro or 0) / 1e6
            when = f"; it resets in {openai_duration(reset - now)}" if reset is not None else ""
            headers = {"x-should-retry": "false"}
            if reset is not None:
                headers["retry-after"] = str(max(1, math.ceil(reset - now)))
            return QuotaExceeded(
                f"The {scope.budget_period} budget of the {who} is spent: ${spent:.2f} of ${budget:.2f} "
                f"(this request may cost up to ${c.cost_micro / 1e6:.4f}){when}.",
                headers=headers,
            )
        wait = max(1, math.ceil(verdict.retry_after))
        headers = {"retry-after": str(wait), **_rate_headers(c, u)}
        if verdict.reason == "parallel":
            message = f"Too many requests in flight for the {who}: the limit is {c.max_parallel} at once."
        else:
            limit = c.rpm if verdict.reason == "requests" else c.tpm
            message = (
                f"Rate limit reached for the {who}: {limit} {verdict.reason} per {self.window_s:g} s. "
                f"Try again in {wait} s."
            )
        return RateLimited(message, headers=headers)

    def _admitted_headers(self, charges: Sequence[Charge], usage: Sequence[ScopeUsage], now: float) -> dict[str, str]:
        """The x-ratelimit-* headers of an admitted request, from what admission counted (no store
        call): the scope with the least left (the key's or its team's), and the time until the
        window has drained what it holds, this request included (to within one bucket)."""
        width = self.window_s / BUCKETS
        drained = openai_duration((math.floor(now / width) + BUCKETS) * width - now)
        headers: dict[str, str] = {}
        rpm = [(c.rpm - u.requests, c.rpm) for c, u in zip(charges, usage) if c.rpm is not None]
        if rpm:
            left, limit = min(rpm)
            headers["x-ratelimit-limit-requests"] = str(limit)
            headers["x-ratelimit-remaining-requests"] = str(max(0, left))
            headers["x-ratelimit-reset-requests"] = drained
        tpm = [(c.tpm - u.tokens, c.tpm) for c, u in zip(charges, usage) if c.tpm is not None]
        if tpm:
            left, limit = min(tpm)
            headers["x-ratelimit-limit-tokens"] = str(limit)
            headers["x-ratelimit-remaining-tokens"] = str(max(0, left))
            headers["x-ratelimit-reset-tokens"] = drained
        return headers

    def status(self) -> dict[str, Any]:
        """For /readyz: the store, and what limits do while it is away."""
        body: dict[str, Any] = {"store": self.store.name, "on_store_failure": self.cfg.on_store_failure}
        if self.store_error is None:
            body["state"] = "ok"
        else:
            body["state"] = "refusing" if self.cfg.on_store_failure == "closed" else "local_only"
            body["reason"] = self.store_error
        return body

    @property
    def ready(self) -> bool:
        """Fail-closed with its store away refuses every limited key: let a balancer know."""
        return self.store_error is None or self.cfg.on_store_failure != "closed"


def _rate_headers(c: Charge, u: ScopeUsage) -> dict[str, str]:
    headers = {}
    if c.rpm is not None:
        headers["x-ratelimit-limit-requests"] = str(c.rpm)
        headers["x-ratelimit-remaining-requests"] = str(max(0, c.rpm - u.requests))
        headers["x-ratelimit-reset-requests"] = openai_duration(u.reset_requests)
    if c.tpm is not None:
        headers["x-ratelimit-limit-tokens"] = str(c.tpm)
        headers["x-ratelimit-remaining-tokens"] = str(max(0, c.tpm - u.tokens))
        headers["x-ratelimit-reset-tokens"] = openai_duration(u.reset_tokens)
    return headers


def _seeded(record: KeyRecord, seeds: Mapping[str, tuple[str, float]]) -> KeyRecord:
    def seed(s: Scope | None) -> Scope | None:
        if s is None or s.id not in seeds:
            return s
        period, usd = seeds[s.id]
        return _with(s, spent_usd=usd, spent_period=period)

    key = seed(record.key)
    assert key is not None
    return KeyRecord(key, seed(record.team), record.metadata)
