"""One contract for the stored Responses state, on both backends: `MemoryStore` (a fake clock)
and `RedisStore` on the real Redis server (real time, short TTLs, a unique key prefix)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from gateway.state_store.base import StoreUnavailable
from gateway.state_store.memory import KV_SWEEP_MIN, MemoryStore
from gateway.state_store.redis import RedisStore
from gateway.state_store.responses import ResponseStore, StoredResponse
from tests.fakes.clock import FakeClock
from tests.gateway.state_store.redis_helpers import REDIS_URL, delete_prefix, redis_available, unique_prefix
from tests.services import require

TTL = 0.5
MAX_BYTES = 64 * 1024


@dataclass
class Backend:
    store: ResponseStore
    advance: Callable[[float], Awaitable[None]]


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = FakeClock(start=100.0)

        async def advance(seconds: float) -> None:
            clock.advance(seconds)

        yield Backend(ResponseStore(MemoryStore(clock), ttl_s=TTL, max_bytes=MAX_BYTES), advance)
        return
    require(redis_available(), f"Redis is not answering at {REDIS_URL}")
    prefix = unique_prefix()
    redis_store = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        yield Backend(ResponseStore(redis_store, ttl_s=TTL, max_bytes=MAX_BYTES), asyncio.sleep)
    finally:
        await redis_store.aclose()
        delete_prefix(prefix)


def stored(response_id: str, text: str = "hi") -> StoredResponse:
    return StoredResponse(
        {"id": response_id, "object": "response", "output": [{"type": "message", "content": [{"text": text}]}]},
        [{"type": "message", "id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": text}]}],
        [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}],
    )


async def test_put_get_round_trip(backend: Backend) -> None:
    original = stored("resp_abc")
    await backend.store.put("alice", original)
    got = await backend.store.get("alice", "resp_abc")
    assert got == original and got is not original


async def test_missing_is_none(backend: Backend) -> None:
    assert await backend.store.get("alice", "resp_nothing") is None
    assert await backend.store.delete("alice", "resp_nothing") is False


async def test_owners_are_isolated(backend: Backend) -> None:
    await backend.store.put("alice", stored("resp_shared", "alice's"))
    assert await backend.store.get("bob", "resp_shared") is None
    assert await backend.store.get(None, "resp_shared") is None  # open access is its own owner
    assert await backend.store.delete("bob", "resp_shared") is False
    got = await backend.store.get("alice", "resp_shared")
    assert got is not None and got.conversation[0]["content"] == "alice's"


async def test_delete(backend: Backend) -> None:
    await backend.store.put("alice", stored("resp_del"))
    assert await backend.store.delete("alice", "resp_del") is True
    assert await backend.store.get("alice", "resp_del") is None
    assert await backend.store.delete("alice", "resp_del") is False


async def test_expires_after_ttl(backend: Backend) -> None:
    await backend.store.put("alice", stored("resp_ttl"))
    await backend.advance(TTL * 0.4)
    assert await backend.store.get("alice", "resp_ttl") is not None
    await backend.advance(TTL * 0.8)
    assert await backend.store.get("alice", "resp_ttl") is None
    assert await backend.store.delete("alice", "resp_ttl") is False


async def test_ids_outside_the_id_shape_are_never_looked_up(backend: Backend) -> None:
    for bad in ("", "../x", "resp_*", "a" * 129, "resp:1"):
        assert await backend.store.get("alice", bad) is None
        assert await backend.store.delete("alice", bad) is False


async def test_a_response_over_the_size_cap_is_not_stored(backend: Backend) -> None:
    small = stored("resp_small")
    assert await backend.store.put("alice", small) is None
    # Just over the cap: the store reports the size it refused and keeps nothing under that id.
    big = stored("resp_big", "x" * MAX_BYTES)
    size = await backend.store.put("alice", big)
    assert size is not None and size > MAX_BYTES
    assert await backend.store.get("alice", "resp_big") is None
    assert await backend.store.get("alice", "resp_small") == small
    # Up to the cap is still stored (the text is thrice in it: output, input item, conversation).
    overhead = size - 3 * MAX_BYTES
    at_cap = stored("resp_cap", "y" * ((MAX_BYTES - overhead) // 3))
    assert await backend.store.put("alice", at_cap) is None
    assert await backend.store.get("alice", "resp_cap") == at_cap


async def test_memory_backend_drops_expired_entries_as_it_grows() -> None:
    clock = FakeClock()
    kv = MemoryStore(clock)
    store = ResponseStore(kv, ttl_s=1.0, max_bytes=MAX_BYTES)
    for i in range(KV_SWEEP_MIN):
        await store.put("a", stored(f"resp_{i}"))
    clock.advance(2.0)
    await store.put("a", stored("resp_new"))
    assert len(kv._kv) == 1  # the expired ones went at the sweep, not only when read


# -- the durable copy (an `Archive`: the database in gateway.persistence.responses) --------


class DictArchive:
    def __init__(self) -> None:
        self.rows: dict[str, bytes] = {}

    def keep(self, key: str, body: bytes, ttl_s: float) -> None:
        self.rows[key] = body

    async def fetch(self, key: str) -> bytes | None:
        return self.rows.get(key)

    async def forget(self, key: str) -> bool:
        return self.rows.pop(key, None) is not None


class AwayStore(MemoryStore):
    """A state store that does not answer."""

    async def kv_get(self, key: str) -> bytes | None:
        raise StoreUnavailable("connection refused")

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None:
        raise StoreUnavailable("connection refused")


async def test_a_state_store_miss_is_read_from_the_archive() -> None:
    kv, kept = MemoryStore(FakeClock()), DictArchive()
    store = ResponseStore(kv, ttl_s=TTL, max_bytes=MAX_BYTES, archive=kept)
    original = stored("resp_durable")
    await store.put("alice", original)
    assert len(kept.rows) == 1
    restarted = ResponseStore(MemoryStore(FakeClock()), ttl_s=TTL, max_bytes=MAX_BYTES, archive=kept)  # Redis lost it
    assert await restarted.get("alice", "resp_durable") == original
    assert await restarted.get("bob", "resp_durable") is None  # the archive is keyed per owner too
    assert await store.put("alice", stored("resp_big", "x" * MAX_BYTES)) is not None
    assert len(kept.rows) == 1  # over the cap: archived neither


async def test_a_state_store_that_does_not_answer_falls_back_to_the_archive() -> None:
    kept = DictArchive()
    store = ResponseStore(AwayStore(FakeClock()), ttl_s=TTL, max_bytes=MAX_BYTES, archive=kept)
    with pytest.raises(StoreUnavailable):
        await store.put("alice", stored("resp_outage"))  # the caller logs it; the archive has it
    assert (await store.get("alice", "resp_outage")) == stored("resp_outage")
    with pytest.raises(StoreUnavailable):  # not in the archive either: unknown, not "not found"
        await store.get("alice", "resp_unknown")


async def test_delete_removes_both_copies() -> None:
    kv, kept = MemoryStore(FakeClock()), DictArchive()
    store = ResponseStore(kv, ttl_s=TTL, max_bytes=MAX_BYTES, archive=kept)
    await store.put("alice", stored("resp_both"))
    assert await store.delete("alice", "resp_both") is True
    assert kept.rows == {} and await store.get("alice", "resp_both") is None
    kept.rows[ResponseStore._key("alice", "resp_only_archived")] = b"{}"
    assert await store.delete("alice", "resp_only_archived") is True
    assert await store.delete("alice", "resp_only_archived") is False
