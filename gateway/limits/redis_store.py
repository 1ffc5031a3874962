"""The Redis backend of `LimitStore`: one Lua script admits a request in every scope at once
(checks first, then counts, so two replicas can never both take the last unit), on the server's
clock. Layout under the prefix (``gw:lim:`` by default)::

    rl:<scope>            hash  r:<bucket> / t:<bucket>     sliding-window requests / tokens
    par:<scope>           zset  request id -> lease end (ms) requests in flight
    bud:<scope>:<period>  string (integer micro-dollars)    spend in the budget period, with PX

Every key expires. Failures become `StoreUnavailable`, as in `gateway.state_store.redis`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.limits.store import Charge, ScopeUsage, Settlement, Verdict
from gateway.state_store.base import StoreUnavailable
from gateway.state_store.redis import _BUCKETS, _NOW
from gateway.state_store.window import BUCKETS
from kernel.redact import mask_urls

_WAIT = """
local function wait_for(buckets, req, tok, rpm, tpm, tokens, width, nb)
  local function fits(r, t) return (rpm < 0 or r + 1 <= rpm) and (tpm < 0 or t + tokens <= tpm) end
  if fits(req, tok) then return 0 end
  local idxs = {}
  for k, _ in pairs(buckets) do table.insert(idxs, k) end
  table.sort(idxs)
  local r, t = req, tok
  for _, k in ipairs(idxs) do
    r = r - buckets[k][1]
    t = t - buckets[k][2]
    if fits(r, t) then return math.max(0, (k + nb) * width - now) end
  end
  return nb * width
end
"""

# KEYS: per charge rl, par, bud. ARGV: window, nb, lease_ms, request id, then per charge
# rpm, tpm, tokens, max_parallel, budget, cost, seed, budget_ttl_ms (-1: unlimited / none).
ADMIT = (
    _NOW
    + _BUCKETS
    + _WAIT
    + """
local window, nb, lease, rid = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local width = window / nb
local cur = math.floor(now / width)
local ms = math.floor(now * 1000)
local n = #KEYS / 3
local seen = {}
local out = {}
for i = 1, n do
  local b = 4 + (i - 1) * 8
  local rpm, tpm, tokens = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local maxpar, budget, cost = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local seed, bttl = ARGV[b + 7], tonumber(ARGV[b + 8])
  local rl, par, bud = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local buckets, req, tok = {}, 0, 0
  if rpm >= 0 or tpm >= 0 then buckets, req, tok = live(rl, cur, nb) end
  local inflight = 0
  if maxpar >= 0 then
    redis.call('ZREMRANGEBYSCORE', par, '-inf', ms)
    inflight = redis.call('ZCARD', par)
  end
  local spent = 0
  if budget >= 0 then
    local v = redis.call('GET', bud)
    if v then spent = tonumber(v) else spent = tonumber(seed) end
  end
  local reason = ''
  if rpm >= 0 and req + 1 > rpm then reason = 'requests'
  elseif tpm >= 0 and tok + tokens > tpm then reason = 'tokens'
  elseif maxpar >= 0 and inflight + 1 > maxpar then reason = 'parallel'
  elseif budget >= 0 and spent + cost > budget then reason = 'budget' end
  local rr, rt = 0, 0
  if reason == 'requests' or reason == 'tokens' then
    rr = wait_for(buckets, req, tok, rpm, -1, 0, width, nb)
    if tpm >= 0 then rt = wait_for(buckets, req, tok, -1, tpm, tokens, width, nb) end
  end
  table.insert(out, req); table.insert(out, tok); table.insert(out, inflight); table.insert(out, spent)
  table.insert(out, string.format('%.6f', rr)); table.insert(out, string.format('%.6f', rt))
  if reason ~= '' then
    local wait = rr
    if reason == 'tokens' then wait = rt elseif reason ~= 'requests' then wait = 1 end
    return {0, i, reason, string.format('%.6f', wait), unpack(out)}
  end
  seen[i] = {rpm, tpm, tokens, maxpar, budget, cost, seed, bttl}
end
for i = 1, n do
  local a = seen[i]
  local rl, par, bud = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if a[1] >= 0 or a[2] >= 0 then
    redis.call('HINCRBY', rl, 'r:' .. cur, 1)
    redis.call('HINCRBY', rl, 't:' .. cur, a[3])
    redis.call('PEXPIRE', rl, math.ceil(window * 2000))
  end
  if a[4] >= 0 then
    redis.call('ZADD', par, ms + lease, rid)
    redis.call('PEXPIRE', par, lease * 2)
  end
  if a[5] >= 0 then
    if redis.call('EXISTS', bud) == 0 then
      if a[8] > 0 then redis.call('SET', bud, a[7], 'PX', a[8]) else redis.call('SET', bud, a[7]) end
    end
    redis.call('INCRBY', bud, a[6])
  end
end
return {1, 0, '', '0', unpack(out)}
"""
)

# KEYS: per settlement rl, par, bud. ARGV: window, nb, request id, then per settlement
# has_rate, tokens_delta, has_parallel, has_budget, cost_delta.
SETTLE = (
    _NOW
    + """
local window, nb, rid = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local cur = math.floor(now / (window / nb))
for i = 1, #KEYS / 3 do
  local b = 3 + (i - 1) * 5
  local rl, par, bud = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local dt = tonumber(ARGV[b + 2])
  if ARGV[b + 1] == '1' and dt ~= 0 then
    redis.call('HINCRBY', rl, 't:' .. cur, dt)
    redis.call('PEXPIRE', rl, math.ceil(window * 2000))
  end
  if ARGV[b + 3] == '1' then redis.call('ZREM', par, rid) end
  local dc = tonumber(ARGV[b + 5])
  if ARGV[b + 4] == '1' and dc ~= 0 and redis.call('EXISTS', bud) == 1 then redis.call('INCRBY', bud, dc) end
end
return 1
"""
)


# Connections per replica: one admission is a single script call of well under a millisecond.
MAX_CONNECTIONS = 16


def _lim(v: int | None) -> int:
    return -1 if v is None else v


class RedisLimitStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "gw:lim:",
        timeout: float = 0.25,
        client: Redis | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.url = mask_urls(url)
        self._p = prefix
        self._timeout = timeout
        # A bounded pool that requests wait on: a burst of admissions shares a few connections
        # instead of opening hundreds at once (each connect may time out on a loaded host, which
        # would read as an outage). The wait counts against the operation's timeout.
        self._r = client or Redis(
            connection_pool=BlockingConnectionPool.from_url(
                url,
                max_connections=max_connections,
                timeout=timeout * 4,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                # One immediate retry on a broken connection (a restarted Redis closed the pooled
                # ones), none on a timeout: an outage must not cost a request twice the wait.
                retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                retry_on_timeout=False,
                health_check_interval=0,
                decode_responses=False,
            )
        )
        self._admit = self._r.register_script(ADMIT)
        self._settle = self._r.register_script(SETTLE)

    async def _call(self, awaitable: Any) -> Any:
        try:
            async with asyncio.timeout(self._timeout * 4):
                return await awaitable
        except (RedisError, OSError, TimeoutError) as exc:
            first = mask_urls(str(exc).splitlines()[0]) if str(exc) else ""
            raise StoreUnavailable(f"redis at {self.url}: {type(exc).__name__}: {first}".rstrip(": ")) from None

    def _keys(self, c: Charge) -> list[str]:
        return [f"{self._p}rl:{c.scope}", f"{self._p}par:{c.scope}", f"{self._p}bud:{c.scope}:{c.period}"]

    async def admit(self, request_id: str, charges: Sequence[Charge], window_s: float, lease_s: float) -> Verdict:
        keys: list[str] = []
        args: list[Any] = [window_s, BUCKETS, max(1, int(lease_s * 1000)), request_id]
        for c in charges:
            keys += self._keys(c)
            args += [
                _lim(c.rpm),
                _lim(c.tpm),
                c.tokens,
                _lim(c.max_parallel),
                _lim(c.budget_micro),
                c.cost_micro,
                c.seed_micro,
                int(c.budget_ttl_s * 1000) if c.budget_ttl_s else 0,
            ]
        out = await self._call(self._admit(keys=keys, args=args))
        usages = []
        for i in range(4, len(out), 6):
            r, t, inflight, spent, rr, rt = out[i : i + 6]
            usages.append(ScopeUsage(int(r), int(t), int(inflight), int(spent), float(rr), float(rt)))
        if int(out[0]):
            for c, u in zip(charges, usages):
                if c.rate:
                    u.requests, u.tokens = u.requests + 1, u.tokens + c.tokens
                u.inflight += c.max_parallel is not None
                u.spent_micro += c.cost_micro if c.budget_micro is not None else 0
            return Verdict(True, usages)
        return Verdict(False, usages, int(out[1]) - 1, out[2].decode(), float(out[3]))

    async def settle(self, request_id: str, settlements: Sequence[Settlement], window_s: float) -> None:
        keys: list[str] = []
        args: list[Any] = [window_s, BUCKETS, request_id]
        for s in settlements:
            c = s.charge
            keys += self._keys(c)
            args += [int(c.rate), s.tokens_delta, int(c.max_parallel is not None), int(c.budget_micro is not None), s.cost_delta_micro]
        if keys:
            await self._call(self._settle(keys=keys, args=args))

    async def spend(self, items: Sequence[tuple[str, str]]) -> list[int | None]:
        if not items:
            return []
        values = await self._call(self._r.mget([f"{self._p}bud:{scope}:{period}" for scope, period in items]))
        return [None if v is None else int(v) for v in values]

    async def aclose(self) -> None:
        try:
            await self._r.aclose(close_connection_pool=True)  # the pool is ours, not the client's
        except (RedisError, OSError):
            pass
