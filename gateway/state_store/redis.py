"""The Redis backend: the same contract as `MemoryStore`, for replicas on several hosts.

Atomicity: every update is one Lua script or one command, run on the server against the
server's clock (``TIME``), so replicas never compare clocks and never read-modify-write a whole
object. Every key has a TTL. Layout (prefix ``gw:`` by default)::

    rl:<key>          hash  r:<bucket> / t:<bucket>       sliding-window requests / tokens
    brk:open:<ep>     string with PX                      breaker open for the key's PTTL
    brk:block:<ep>    string with PX                      upstream Retry-After
    inflight          hash  <replica>\\x1f<ep> -> "n,prefill,expires_ms"
    lat:<ep>          hash  <field> -> decayed sum, _t -> server time of the last decay
    aff               stream  r=<replica> b=<packed batch of (endpoint, insert|truncate, uint64 blocks)>
    kv:<key>          string with PX                      probe evidence (JSON), stored responses
    lease:<key>       string with PX                      a probe lease: the holder's name (set if free or ours)
    health            hash  <ep> -> "<v1> <v2> <record>"  each endpoint's health record and its version

Connection errors and timeouts (`StateStoreConfig.timeout_s`, no client-side retries) become
`StoreUnavailable`: the caller decides how to go on without the store.
"""

from __future__ import annotations

import asyncio
import struct
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from gateway.state_store.base import (
    HEALTH_TTL_S,
    AffinityEntry,
    BreakerShared,
    RateResult,
    StoreRejected,
    StoreUnavailable,
)
from gateway.state_store.window import BUCKETS
from kernel.redact import mask_urls

SEP = "\x1f"
LATENCY_TTL_MS = 86_400_000
AFFINITY_TTL_MS = 86_400_000
# Bounded: entries carry whole chains (8 bytes a block), and replicas only need the last seconds.
AFFINITY_MAXLEN = 20_000

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"

# Shared by acquire and usage: read the live buckets, drop the expired ones.
_BUCKETS = """
local function live(key, cur, nb)
  local data = redis.call('HGETALL', key)
  local buckets, req, tok = {}, 0, 0
  for i = 1, #data, 2 do
    local f = data[i]
    local idx = tonumber(string.sub(f, 3))
    if idx <= cur - nb then
      redis.call('HDEL', key, f)
    else
      local v = tonumber(data[i + 1])
      local b = buckets[idx] or {0, 0}
      if string.sub(f, 1, 1) == 'r' then b[1] = v; req = req + v else b[2] = v; tok = tok + v end
      buckets[idx] = b
    end
  end
  return buckets, req, tok
end
"""

RATE_ACQUIRE = (
    _NOW
    + _BUCKETS
    + """
local window, nb = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, tokens = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local width = window / nb
local cur = math.floor(now / width)
local buckets, req, tok = live(KEYS[1], cur, nb)
local function fits(r, t) return (rpm < 0 or r + 1 <= rpm) and (tpm < 0 or t + tokens <= tpm) end
if fits(req, tok) then
  redis.call('HINCRBY', KEYS[1], 'r:' .. cur, 1)
  redis.call('HINCRBY', KEYS[1], 't:' .. cur, tokens)
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 2000))
  return {1, req + 1, tok + tokens, '0'}
end
local idxs = {}
for k, _ in pairs(buckets) do table.insert(idxs, k) end
table.sort(idxs)
local r, t, wait = req, tok, window
for _, k in ipairs(idxs) do
  r = r - buckets[k][1]
  t = t - buckets[k][2]
  if fits(r, t) then wait = (k + nb) * width - now; break end
end
return {0, req, tok, string.format('%.6f', math.max(0, wait))}
"""
)

RATE_ADD = (
    _NOW
    + """
local window, nb = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = math.floor(now / (window / nb))
for i = 1, #KEYS do
  local r, t = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  if r ~= 0 then redis.call('HINCRBY', KEYS[i], 'r:' .. cur, r) end
  if t ~= 0 then redis.call('HINCRBY', KEYS[i], 't:' .. cur, t) end
  redis.call('PEXPIRE', KEYS[i], math.ceil(window * 2000))
end
return 1
"""
)

RATE_USAGE = (
    _NOW
    + _BUCKETS
    + """
local window, nb = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = math.floor(now / (window / nb))
local out = {}
for i = 1, #KEYS do
  local _, req, tok = live(KEYS[i], cur, nb)
  table.insert(out, req)
  table.insert(out, tok)
end
return out
"""
)

# Extend a PX key only if the new expiry is later than the current one.
EXTEND = """
local cur = redis.call('PTTL', KEYS[1])
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) end
return 1
"""

INFLIGHT_REPORT = (
    _NOW
    + """
local replica, ttl = ARGV[1], tonumber(ARGV[2])
local expires = math.floor((now + ttl) * 1000)
for i = 3, #ARGV, 3 do
  redis.call('HSET', KEYS[1], replica .. '\\31' .. ARGV[i], ARGV[i + 1] .. ',' .. ARGV[i + 2] .. ',' .. expires)
end
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 4000))
return 1
"""
)

INFLIGHT_TOTALS = (
    _NOW
    + """
local exclude = ARGV[1]
local ms = now * 1000
local data = redis.call('HGETALL', KEYS[1])
local totals = {}
for i = 1, #data, 2 do
  local field, value = data[i], data[i + 1]
  local cut = string.find(field, '\\31', 1, true)
  local replica, ep = string.sub(field, 1, cut - 1), string.sub(field, cut + 1)
  local n, prefill, expires = string.match(value, '^(-?%d+),(-?%d+),(%d+)$')
  if tonumber(expires) <= ms then
    redis.call('HDEL', KEYS[1], field)
  elseif replica ~= exclude then
    local t = totals[ep] or {0, 0}
    t[1] = t[1] + tonumber(n)
    t[2] = t[2] + tonumber(prefill)
    totals[ep] = t
  end
end
local out = {}
for ep, t in pairs(totals) do
  table.insert(out, ep)
  table.insert(out, t[1])
  table.insert(out, t[2])
end
return out
"""
)

LATENCY_MERGE = (
    _NOW
    + """
local hl, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local pos = 3
for k = 1, #KEYS do
  local n = tonumber(ARGV[pos])
  pos = pos + 1
  local data = redis.call('HGETALL', KEYS[k])
  local vals, t0 = {}, now
  for i = 1, #data, 2 do
    if data[i] == '_t' then t0 = tonumber(data[i + 1]) else vals[data[i]] = tonumber(data[i + 1]) end
  end
  local f = 1
  if now > t0 then f = math.pow(0.5, (now - t0) / hl) end
  for name, v in pairs(vals) do vals[name] = v * f end
  for i = 1, n do
    local name = ARGV[pos]
    vals[name] = (vals[name] or 0) + tonumber(ARGV[pos + 1])
    pos = pos + 2
  end
  local args = {'_t', string.format('%.6f', now)}
  for name, v in pairs(vals) do
    table.insert(args, name)
    table.insert(args, string.format('%.17g', v))
  end
  redis.call('HSET', KEYS[k], unpack(args))
  redis.call('PEXPIRE', KEYS[k], ttl)
end
return 1
"""
)


# Take a lease that is free (SET NX PX) or renew our own; 0 when another holder has it.
LEASE_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Delete a lease only if this holder still has it (it may have expired and been taken).
LEASE_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Replace an endpoint's health record unless the stored one has a later version (v1, then v2).
HEALTH_PUBLISH = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local v1, v2 = tonumber(ARGV[2]), tonumber(ARGV[3])
if cur then
  local s1, s2 = string.match(cur, '^(%S+) (%S+) ')
  s1, s2 = tonumber(s1), tonumber(s2)
  -- an unreadable stored record is replaced, not left to block every publish
  if s1 and s2 and (s1 > v1 or (s1 == v1 and s2 > v2)) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

# Every key's PTTL in one command (a pipeline of N PTTLs costs N commands' client-side packing).
PTTLS = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('PTTL', KEYS[i]) end
return out
"""


# Redis's answers when a value (not the server) is the trouble, e.g. HINCRBY past its range.
_VALUE_ERRORS = ("not an integer or out of range", "would overflow", "is not a valid float")


def _refuses_values(exc: ResponseError) -> bool:
    text = str(exc)
    return any(marker in text for marker in _VALUE_ERRORS)


def _limit(value: int | None) -> int:
    return -1 if value is None else value


class RedisStore:
    name = "redis"
    shared = True

    def __init__(self, url: str, *, prefix: str = "gw:", timeout: float = 0.25, client: Redis | None = None) -> None:
        self.url = mask_urls(url)  # for messages: /readyz and the log show it
        self._p = prefix
        self._timeout = timeout
        self._r = client or Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
            decode_responses=False,
        )
        self._acquire = self._r.register_script(RATE_ACQUIRE)
        self._add = self._r.register_script(RATE_ADD)
        self._usage = self._r.register_script(RATE_USAGE)
        self._extend = self._r.register_script(EXTEND)
        self._report = self._r.register_script(INFLIGHT_REPORT)
        self._totals = self._r.register_script(INFLIGHT_TOTALS)
        self._merge = self._r.register_script(LATENCY_MERGE)
        self._pttls = self._r.register_script(PTTLS)
        self._lease = self._r.register_script(LEASE_ACQUIRE)
        self._release = self._r.register_script(LEASE_RELEASE)
        self._health = self._r.register_script(HEALTH_PUBLISH)

    async def _call(self, awaitable: Any) -> Any:
        try:
            async with asyncio.timeout(self._timeout * 4):
                return await awaitable
        except (RedisError, OSError, TimeoutError) as exc:
            kind = StoreRejected if isinstance(exc, ResponseError) and _refuses_values(exc) else StoreUnavailable
            first = mask_urls(str(exc).splitlines()[0]) if str(exc) else ""
            raise kind(f"redis at {self.url}: {type(exc).__name__}: {first}".rstrip(": ")) from None

    async def ping(self) -> None:
        await self._call(self._r.ping())

    async def aclose(self) -> None:
        try:
            await self._r.aclose()
        except (RedisError, OSError):
            pass

    # -- rate limits ------------------------------------------------------------------

    def _rk(self, key: str) -> str:
        return f"{self._p}rl:{key}"

    async def rate_acquire(self, key: str, *, rpm: int | None, tpm: int | None, tokens: int, window_s: float) -> RateResult:
        out = await self._call(
            self._acquire(keys=[self._rk(key)], args=[window_s, BUCKETS, _limit(rpm), _limit(tpm), tokens])
        )
        return RateResult(bool(out[0]), int(out[1]), int(out[2]), float(out[3]))

    async def rate_add(self, deltas: Mapping[str, tuple[int, int]], window_s: float) -> None:
        if not deltas:
            return
        args: list[Any] = [window_s, BUCKETS]
        for requests, tokens in deltas.values():
            args += [requests, tokens]
        await self._call(self._add(keys=[self._rk(k) for k in deltas], args=args))

    async def rate_usage(self, keys: Sequence[str], window_s: float) -> dict[str, tuple[int, int]]:
        if not keys:
            return {}
        out = await self._call(self._usage(keys=[self._rk(k) for k in keys], args=[window_s, BUCKETS]))
        return {k: (int(out[2 * i]), int(out[2 * i + 1])) for i, k in enumerate(keys)}

    # -- breaker ----------------------------------------------------------------------

    async def breaker_publish(self, endpoint: str, *, open_for: float | None, blocked_for: float) -> None:
        key = f"{self._p}brk:open:{endpoint}"
        if open_for is not None and open_for > 0:
            await self._call(self._r.set(key, b"1", px=max(1, int(open_for * 1000))))
        elif open_for is not None:
            await self._call(self._r.delete(key))
        if blocked_for > 0:
            await self._call(self._extend(keys=[f"{self._p}brk:block:{endpoint}"], args=[max(1, int(blocked_for * 1000))]))

    async def breaker_read(self, endpoints: Sequence[str]) -> dict[str, BreakerShared]:
        if not endpoints:
            return {}
        keys = [k for e in endpoints for k in (f"{self._p}brk:open:{e}", f"{self._p}brk:block:{e}")]
        ttls = await self._call(self._pttls(keys=keys))
        out = {}
        for i, endpoint in enumerate(endpoints):
            open_ms, block_ms = max(0, int(ttls[2 * i])), max(0, int(ttls[2 * i + 1]))
            if open_ms or block_ms:
                out[endpoint] = BreakerShared(open_ms / 1000.0, block_ms / 1000.0)
        return out

    # -- in-flight --------------------------------------------------------------------

    async def inflight_report(self, replica: str, counts: Mapping[str, tuple[int, int]], ttl_s: float) -> None:
        args: list[Any] = [replica, ttl_s]
        for endpoint, (n, prefill) in counts.items():
            args += [endpoint, int(n), int(prefill)]
        await self._call(self._report(keys=[f"{self._p}inflight"], args=args))

    async def inflight_totals(self, exclude_replica: str) -> dict[str, tuple[int, int]]:
        out = await self._call(self._totals(keys=[f"{self._p}inflight"], args=[exclude_replica]))
        return {out[i].decode(): (int(out[i + 1]), int(out[i + 2])) for i in range(0, len(out), 3)}

    # -- latency ----------------------------------------------------------------------

    async def latency_merge(self, deltas: Mapping[str, Mapping[str, float]], half_life_s: float) -> None:
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return
        args: list[Any] = [half_life_s, LATENCY_TTL_MS]
        for delta in deltas.values():
            args.append(len(delta))
            for name, value in delta.items():
                args += [name, repr(float(value))]
        await self._call(self._merge(keys=[f"{self._p}lat:{e}" for e in deltas], args=args))

    async def latency_read(self, endpoints: Sequence[str], half_life_s: float) -> dict[str, dict[str, float]]:
        if not endpoints:
            return {}
        pipe = self._r.pipeline(transaction=False)
        pipe.time()
        for endpoint in endpoints:
            pipe.hgetall(f"{self._p}lat:{endpoint}")
        replies = await self._call(pipe.execute())
        seconds, micros = replies[0]
        now = seconds + micros / 1e6
        out = {}
        for endpoint, raw in zip(endpoints, replies[1:]):
            if not raw:
                continue
            fields = {k.decode(): float(v) for k, v in raw.items()}
            age = now - fields.pop("_t", now)
            factor = 0.5 ** (age / half_life_s) if age > 0 else 1.0
            out[endpoint] = {k: v * factor for k, v in fields.items()}
        return out

    # -- affinity log -----------------------------------------------------------------

    async def affinity_publish(self, entries: Sequence[AffinityEntry]) -> None:
        if not entries:
            return
        # One stream entry per batch: a packed list of (endpoint, op, blocks).
        key = f"{self._p}aff"
        pipe = self._r.pipeline(transaction=False)
        batches: list[list[AffinityEntry]] = []
        for entry in entries:  # consecutive entries of one replica share a stream entry
            if batches and batches[-1][0].replica == entry.replica:
                batches[-1].append(entry)
            else:
                batches.append([entry])
        for batch in batches:
            pipe.xadd(key, {"r": batch[0].replica, "b": _pack(batch)}, maxlen=AFFINITY_MAXLEN, approximate=True)
        pipe.pexpire(key, AFFINITY_TTL_MS)
        await self._call(pipe.execute())

    async def affinity_read(self, cursor: str | None, limit: int) -> tuple[list[AffinityEntry], str]:
        key = f"{self._p}aff"
        if cursor is None:
            last = await self._call(self._r.xrevrange(key, count=1))
            return [], last[0][0].decode() if last else "0-0"
        rows = await self._call(self._r.xrange(key, min=f"({cursor}", max="+", count=limit))
        out: list[AffinityEntry] = []
        for entry_id, fields in rows:
            out += _unpack(fields[b"r"].decode(), fields[b"b"])
            cursor = entry_id.decode()
        return out, cursor

    # -- health states ----------------------------------------------------------------

    async def health_publish(self, endpoint: str, version: tuple[float, float], record: bytes) -> bool:
        # repr: the shortest text that reads back as the same double, in Lua as in Python.
        args: list[str | bytes | int] = [endpoint, repr(float(version[0])), repr(float(version[1])), record, int(HEALTH_TTL_S * 1000)]
        return bool(int(await self._call(self._health(keys=[f"{self._p}health"], args=args))))

    async def health_read(self) -> dict[str, bytes]:
        raw = await self._call(self._r.hgetall(f"{self._p}health"))
        out = {}
        for k, v in raw.items():
            parts = bytes(v).split(b" ", 2)
            if len(parts) == 3:  # else not written by us: skipped, and replaced by the next publish
                out[k.decode()] = parts[2]
        return out

    # -- key/value and leases (probes) ---------------------------------------------------

    async def kv_get(self, key: str) -> bytes | None:
        value = await self._call(self._r.get(f"{self._p}kv:{key}"))
        return bytes(value) if value is not None else None

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._call(self._r.set(f"{self._p}kv:{key}", value, px=max(1, int(ttl_s * 1000))))

    async def kv_delete(self, key: str) -> bool:
        return bool(await self._call(self._r.delete(f"{self._p}kv:{key}")))

    async def lease_acquire(self, key: str, owner: str, ttl_s: float) -> bool:
        taken = await self._call(self._lease(keys=[f"{self._p}lease:{key}"], args=[owner, max(1, int(ttl_s * 1000))]))
        return bool(int(taken))

    async def lease_release(self, key: str, owner: str) -> None:
        await self._call(self._release(keys=[f"{self._p}lease:{key}"], args=[owner]))


_HEAD = struct.Struct("<HBI")  # endpoint id length, op, block count
_OPS = {"insert": 0, "truncate": 1}
_OP_NAMES = {v: k for k, v in _OPS.items()}


def _pack(entries: Sequence[AffinityEntry]) -> bytes:
    parts = []
    for entry in entries:
        endpoint = entry.endpoint.encode()
        parts += [_HEAD.pack(len(endpoint), _OPS[entry.op], len(entry.blocks)), endpoint, array("Q", entry.blocks).tobytes()]
    return b"".join(parts)


def _unpack(replica: str, blob: bytes) -> list[AffinityEntry]:
    out = []
    offset = 0
    while offset < len(blob):
        size, op, count = _HEAD.unpack_from(blob, offset)
        offset += _HEAD.size
        endpoint = blob[offset : offset + size].decode()
        offset += size
        blocks = array("Q")
        blocks.frombytes(blob[offset : offset + 8 * count])
        offset += 8 * count
        out.append(AffinityEntry(replica, endpoint, _OP_NAMES[op], tuple(blocks)))
    return out
