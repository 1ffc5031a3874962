"""prompt_cache_key sharding: one key up to ~15 RPM per (key name, family), power-of-two shards above."""

from __future__ import annotations

from typing import Any

import pytest
import xxhash

from gateway.routing.cache_key import CacheKeySharder, conversation_hash
from gateway.routing.features import DEFAULT_BLOCKS, RequestFeatures, extract

# Longer than family_bytes (4096): conversations share the family, and the first block past it
# holds the start of their own first user turn.
SYSTEM = "You are a careful assistant. " * 147
FAMILY_BYTES = 4096


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def body(conversation: int, turns: int = 1, system: str = SYSTEM) -> dict[str, Any]:
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    for turn in range(turns):
        if turn:
            messages.append({"role": "assistant", "content": f"answer {turn}"})
        messages.append({"role": "user", "content": f"task {conversation} turn {turn} " + "detail " * 100})
    return {"model": "m", "messages": messages}


def features(conversation: int = 0, turns: int = 1, key_name: str | None = "team", **kw: Any) -> RequestFeatures:
    return extract(
        "chat", body(conversation, turns, **kw), blocks=DEFAULT_BLOCKS, family_bytes=FAMILY_BYTES, expected_output_tokens=16, key_name=key_name
    )


def legacy_key(f: RequestFeatures) -> str:
    """The key the gateway sent before sharding existed."""
    return f"gw-{xxhash.xxh3_64_intdigest((f.key_name or '-').encode(), f.family & 0xFFFFFFFFFFFFFFFF):016x}"


def load(sharder: CacheKeySharder, clock: FakeClock, requests: int, conversations: int = 1000, key_name: str = "team") -> list[str]:
    """`requests` requests of one family within a minute, over distinct conversations."""
    keys = []
    for i in range(requests):
        keys.append(sharder.key_for(features(i % conversations, key_name=key_name)))
        clock.now += 0.01
    return keys


def shard_of(key: str) -> int:
    """The shard a key names: shard 0 keeps the unsharded key."""
    return int(key.rsplit("-s", 1)[1]) if "-s" in key else 0


def test_conversations_of_one_family_share_the_family_not_the_first_block_past_it() -> None:
    a, b = features(1), features(2)
    assert a.family == b.family and a.family_blocks == DEFAULT_BLOCKS.count(FAMILY_BYTES)
    assert len(a.chain) > a.family_blocks and conversation_hash(a) != conversation_hash(b)
    # A client's own key: not ours to shard, and its family covers no block.
    keyed = extract("chat", {**body(1), "prompt_cache_key": "mine"}, blocks=DEFAULT_BLOCKS, family_bytes=FAMILY_BYTES, expected_output_tokens=16)
    assert keyed.family_blocks == 0


def test_below_the_threshold_the_key_is_the_unsharded_one() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    keys = load(sharder, clock, 15)
    assert keys == [legacy_key(features(i)) for i in range(15)]
    assert len(set(keys)) == 1


def test_above_the_threshold_conversations_spread_over_shards() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    unsharded = legacy_key(features(0))
    keys = load(sharder, clock, 60)  # 60 RPM / 15: 4 shards
    assert sharder.current_shards(features(0)) == 4
    assert {shard_of(k) for k in keys[-30:]} == {0, 1, 2, 3}
    # Shard 0 keeps the unsharded key; the others extend it.
    assert all(k == unsharded if shard_of(k) == 0 else k.startswith(unsharded + "-s") for k in keys)


def test_a_conversation_keeps_its_shard_across_turns() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    load(sharder, clock, 40)  # 40 RPM: 4 shards
    for conversation in range(8):
        turns = [features(conversation, turns) for turns in (1, 2, 3, 4)]
        assert len({conversation_hash(f) for f in turns}) == 1
        keys = [sharder.key_for(f) for f in turns]
        assert len(set(keys)) == 1 and sharder.current_shards(turns[0]) > 1


def test_a_short_first_turn_shards_by_its_family() -> None:
    # All family: no block past it, so the family hash picks the shard.
    f = features(0, system="short")
    assert len(f.chain) <= f.family_blocks and conversation_hash(f) == f.family


def test_the_rate_decays_after_a_minute_of_silence() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    load(sharder, clock, 100)
    assert sharder.current_shards(features(1)) == 8
    clock.now += 59.0
    sharder.key_for(features(1))
    assert sharder.current_shards(features(1)) > 1  # still within the minute
    clock.now += 60.0
    assert sharder.key_for(features(1)) == legacy_key(features(1))
    assert sharder.current_shards(features(1)) == 1


@pytest.mark.parametrize("max_shards", [1, 4, 10, 16])
def test_shard_count_is_a_capped_power_of_two(max_shards: int) -> None:
    sharder = CacheKeySharder(FakeClock(), shard_rpm=15.0, max_shards=max_shards)
    cap = {1: 1, 4: 4, 10: 8, 16: 16}[max_shards]
    counts = [sharder.shards(rpm) for rpm in range(0, 2000)]
    assert all(n & (n - 1) == 0 and 1 <= n <= cap for n in counts)
    assert counts[15] == 1 and counts[-1] == cap
    assert sharder.shards(16) == min(2, cap) and sharder.shards(31) == min(4, cap)


def test_keys_under_heavy_load_stay_within_max_shards() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock, max_shards=4)
    shards = {shard_of(k) for k in load(sharder, clock, 2000)[-500:]}
    assert shards == {0, 1, 2, 3}


def test_different_key_names_never_share_a_key() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    assert sharder.key_for(features(0, key_name="a")) != sharder.key_for(features(0, key_name="b"))
    assert sharder.key_for(features(0, key_name=None)) != sharder.key_for(features(0, key_name="a"))
    hot_a = load(sharder, clock, 100, conversations=1, key_name="a")[-1]
    b = sharder.key_for(features(0, key_name="b"))
    # Counted apart: a's load does not shard b, and their keys differ even when both shard.
    assert sharder.current_shards(features(0, key_name="a")) > 1 and b == legacy_key(features(0, key_name="b"))
    assert sharder.current_shards(features(0, key_name="b")) == 1
    hot_b = load(sharder, clock, 100, conversations=1, key_name="b")[-1]
    assert shard_of(hot_b) == shard_of(hot_a) and hot_a != hot_b


def test_tracked_families_are_capped_least_recently_used_first() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock, max_families=50)
    for family in range(500):
        sharder.key_for(features(0, system=f"family {family}"))
    assert len(sharder) == 50
    # A hot family touched last survives the churn; one left idle is forgotten (and starts over).
    load(sharder, clock, 30)
    sharder.key_for(features(0, system="cold"))
    for family in range(48):
        sharder.key_for(features(0, system=f"other {family}"))
    sharder.key_for(features(1))
    assert sharder.current_shards(features(1)) > 1
    for family in range(50):
        sharder.key_for(features(0, system=f"churn {family}"))
    assert len(sharder) == 50
    assert sharder.key_for(features(1)) == legacy_key(features(1))


def test_timestamps_per_family_are_bounded() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock, shard_rpm=15.0, max_shards=16)
    load(sharder, clock, 5000, conversations=1)
    (family,) = sharder._recent.values()
    assert len(family.recent) == 15 * 16 + 1


def test_shard_zero_keeps_its_key_when_the_family_turns_hot() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock)
    before = {c: sharder.key_for(features(c)) for c in range(10)}
    load(sharder, clock, 40)
    after = {c: sharder.key_for(features(c)) for c in range(10)}
    assert sharder.current_shards(features(0)) == 4
    kept = [c for c in range(10) if shard_of(after[c]) == 0]
    assert kept and all(after[c] == before[c] for c in kept)
    assert all(after[c] != before[c] for c in range(10) if c not in kept)


def test_a_rate_hovering_at_the_threshold_does_not_flap() -> None:
    clock = FakeClock()
    sharder = CacheKeySharder(clock, shard_rpm=15.0)

    def steady(rpm: int, minutes: int = 2) -> set[int]:
        seen = set()
        for _ in range(rpm * minutes):
            sharder.key_for(features(0))
            seen.add(sharder.current_shards(features(0)))
            clock.now += 60.0 / rpm
        return seen

    steady(16)
    assert sharder.current_shards(features(0)) == 2
    assert steady(14) == {2}  # just under 15: kept (14 x 1.25 > 15)
    assert steady(16) == {2}
    assert 1 in steady(11)  # clearly under: back to one key (11 x 1.25 <= 15)
    assert sharder.current_shards(features(0)) == 1


def test_expected_output_counts_every_prompt_and_best_of() -> None:
    def expected(body: dict[str, object]) -> int:
        f = extract("completions", {"model": "m", "max_tokens": 10, **body}, blocks=DEFAULT_BLOCKS, family_bytes=FAMILY_BYTES, expected_output_tokens=16)
        return f.expected_output_tokens

    assert expected({"prompt": "a"}) == 10
    assert expected({"prompt": [1, 2, 3]}) == 10  # one prompt of tokens
    assert expected({"prompt": ["a", "b", "c"], "best_of": 4, "n": 2}) == 10 * 4 * 3
    assert expected({"prompt": [[1], [2]], "n": 3}) == 10 * 3 * 2
