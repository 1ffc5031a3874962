"""Evidence state: its JSON form, and the store on memory (fake clock) and on the real Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from gateway.state_store.memory import MemoryStore
from gateway.state_store.redis import RedisStore
from probes.evidence import EVIDENCE_TTL_SECONDS, EvidenceState, EvidenceStore
from tests.fakes.clock import FakeClock
from tests.gateway.state_store.redis_helpers import (
    REDIS_URL,
    delete_prefix,
    keys_with_ttl,
    redis_available,
    unique_prefix,
)
from tests.services import require

STATE = EvidenceState(cusum={"logprob_drift": 10.5, "fidelity": 0.25}, clean_rounds=2, suspects=("logprob_drift",),
                      errors=3, last_error="connection refused", updated=1234.5)


def test_json_round_trip_and_reset() -> None:
    assert EvidenceState.from_json(STATE.to_json()) == STATE
    assert STATE.peak == 10.5 and EvidenceState().peak == 0.0
    reset = STATE.reset()
    assert (reset.cusum, reset.clean_rounds, reset.suspects) == ({}, 0, ())
    assert (reset.errors, reset.last_error) == (3, "connection refused")  # availability evidence stays


def test_fields_a_newer_replica_wrote_survive_an_older_ones_round_trip() -> None:
    """Review finding: in a rolling deploy a replica that did not know `own` and `held_until` wrote
    the evidence back without them. Fields this version does not know are kept and written back."""
    newer = json.loads(STATE.to_json()) | {"future_field": {"fidelity": 3.0}, "future_hold": 99.5}
    read = EvidenceState.from_json(json.dumps(newer))
    assert read.cusum == STATE.cusum
    updated = replace(read, clean_rounds=5)
    written = json.loads(updated.to_json())
    assert written["future_field"] == {"fidelity": 3.0} and written["future_hold"] == 99.5
    assert written["clean_rounds"] == 5
    assert "future_field" not in json.loads(updated.reset().to_json())  # reset forgets quality evidence
    assert EvidenceState.from_json(EvidenceState().to_json()).unknown == {}  # every field it writes, it knows


async def test_memory_store_keeps_and_expires() -> None:
    clock = FakeClock()
    store = EvidenceStore(MemoryStore(clock))
    assert await store.get("p/m") == EvidenceState()
    await store.put("p/m", STATE)
    assert await store.get("p/m") == STATE and await store.get("q/m") == EvidenceState()
    clock.advance(EVIDENCE_TTL_SECONDS + 1)
    assert await store.get("p/m") == EvidenceState()


@pytest.fixture
async def redis_store() -> AsyncIterator[tuple[RedisStore, str]]:
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        yield store, prefix
    finally:
        await store.aclose()
        delete_prefix(prefix)


async def test_redis_store_is_shared_between_replicas(redis_store: tuple[RedisStore, str]) -> None:
    store, prefix = redis_store
    other = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        await EvidenceStore(store).put("p/m", STATE)
        assert await EvidenceStore(other).get("p/m") == STATE
    finally:
        await other.aclose()
    ttls = keys_with_ttl(prefix)
    assert list(ttls) == [f"{prefix}kv:probe:evidence:p/m"] and 0 < ttls[f"{prefix}kv:probe:evidence:p/m"]
