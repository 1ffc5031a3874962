"""The chain over the canonical (model, tools, messages) prefix, and the per-endpoint index."""

from __future__ import annotations

import pytest

from gateway.routing.affinity import (
    CACHE_PROFILES,
    AffinityIndex,
    CacheProfile,
    predicted_hit,
    profile_for,
)
from gateway.routing.features import Blocks, chain_hashes
from tests.gateway.routing.helpers import CFG, endpoint, features, local

SYSTEM = "You are a careful coding agent. " * 100  # ~3.2 KB: six full 512-byte blocks


def conversation(turns: int, *, model: str = "m", tools: list | None = None) -> dict:
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"step {i}: " + "run the tests and read the output " * 10})
        messages.append({"role": "assistant", "content": f"done {i} " * 30})
    body: dict = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    return body


def test_appending_a_turn_keeps_every_earlier_block() -> None:
    short, longer = features(conversation(2)), features(conversation(3))
    assert len(longer.chain) > len(short.chain) >= 5
    assert longer.chain[: len(short.chain)] == short.chain


def test_the_chain_depends_on_model_and_tools_but_not_on_key_or_tool_order() -> None:
    base = features(conversation(1)).chain
    assert features(conversation(1, model="other")).chain[0] != base[0]
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("b", "a")]
    with_tools = features(conversation(1, tools=tools)).chain
    assert with_tools[0] != base[0]
    assert features(conversation(1, tools=list(reversed(tools)))).chain == with_tools
    reordered = conversation(1)
    reordered["messages"] = [{"content": m["content"], "role": m["role"]} for m in reordered["messages"]]
    assert features(reordered).chain == base


def test_family_is_stable_across_turns_and_distinct_per_conversation() -> None:
    first = features({"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "task A"}]})
    later = conversation(0)
    later["messages"] += [{"role": "user", "content": "task A"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    assert features(later).family == first.family
    other = features({"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "task B"}]})
    assert other.family != first.family
    keyed = features({"model": "m", "messages": [{"role": "user", "content": "x"}], "prompt_cache_key": "sess-1"})
    assert keyed.family == features({"model": "m", "messages": [{"role": "user", "content": "y"}], "prompt_cache_key": "sess-1"}).family


def test_embeddings_have_no_chain() -> None:
    assert features({"model": "m", "input": "hello " * 200}, op="embeddings").chain == []


def index(capacity_tokens: int | None = None, ttl: float = 100.0) -> AffinityIndex:
    idx = AffinityIndex(blocks=Blocks(256, 0, 256), max_blocks=10_000, alpha=0.5)  # 64-token blocks
    idx.configure("e", CacheProfile(ttl_s=ttl, capacity_tokens=capacity_tokens))
    return idx


def test_match_is_the_longest_held_prefix() -> None:
    idx = index()
    chain = features(conversation(3)).chain
    assert idx.match("e", chain, 0) == 0
    idx.insert("e", chain[:7], 0)
    assert idx.match("e", chain, 1) == 7
    assert idx.match("e", chain[:5], 1) == 5
    idx.insert("e", chain, 0)
    assert idx.match("e", chain, 1) == len(chain)
    assert idx.match("other", chain, 1) == 0


def test_eviction_takes_tails_first() -> None:
    idx = index(capacity_tokens=64 * 10)  # ten blocks
    a = features(conversation(3)).chain[:8]
    b = [h + 1 for h in a]  # an unrelated chain
    idx.insert("e", a, 0)
    idx.insert("e", b, 1)  # 16 blocks > 10: a's tail goes first
    assert idx.size("e") == 10
    assert idx.match("e", b, 2) == 8
    assert idx.match("e", a, 2) == 2  # a's head survived, its tail did not


def test_expired_blocks_do_not_match() -> None:
    idx = index(ttl=10.0)
    chain = features(conversation(2)).chain
    idx.insert("e", chain, 0)
    assert idx.match("e", chain, 9.9) == len(chain)
    assert idx.match("e", chain, 10.1) == 0
    idx.insert("e", chain[:3], 5)  # touching the head refreshes it only
    assert idx.match("e", chain, 12) == 3


def test_feedback_truncates_and_learns_reliability() -> None:
    idx = index()
    chain = features(conversation(3)).chain
    idx.insert("e", chain, 0)
    idx.observe("e", chain, predicted_blocks=len(chain), cached_blocks=len(chain) // 2, now=1)
    assert idx.reliability("e") == pytest.approx(1.0 + 0.5 * (0.5 - 1.0), rel=0.05)
    # The prompt is now cached in full (tentatively), so the whole chain matches again.
    assert idx.match("e", chain, 2) == len(chain)
    idx.observe("e", chain, predicted_blocks=len(chain), cached_blocks=len(chain), now=3)
    assert idx.reliability("e") > 0.75
    # No report (llama.cpp): insertion only, reliability unchanged.
    before = idx.reliability("e")
    idx.observe("e", chain, predicted_blocks=len(chain), cached_blocks=None, now=4)
    assert idx.reliability("e") == before


def test_truncate_removes_blocks() -> None:
    idx = index()
    chain = features(conversation(2)).chain
    idx.insert("e", chain, 0)
    idx.truncate("e", chain[4:])
    assert idx.match("e", chain, 1) == 4


def test_predicted_hit_applies_minimum_and_step() -> None:
    openai = CACHE_PROFILES["openai"]
    assert predicted_hit(1000, 1.0, openai) == 0  # below 1024
    assert predicted_hit(1500, 1.0, openai) == 1408  # 128-token steps
    assert predicted_hit(3000, 0.5, openai) == 1408
    assert predicted_hit(100, 1.0, CACHE_PROFILES["engine"]) == 100


def test_profiles_by_kind_and_overrides() -> None:
    assert profile_for(endpoint("o/m", kind="together")).prompt_cache_key
    assert profile_for(endpoint("d/m", kind="deepseek")).step_tokens == 64
    llama = profile_for(endpoint("l/m", kind="llamacpp"))
    assert llama.reports and llama.capacity_tokens == 8192  # llama-server reports cached_tokens
    tuned = profile_for(local("v-0", cache={"capacity_tokens": 1000, "ttl_s": 5, "reports": False}))
    assert (tuned.capacity_tokens, tuned.ttl_s, tuned.reports) == (1000, 5, False)
    assert profile_for(endpoint("n/m", routing={"cache": {"kind": "none"}})).capacity_tokens == 0


def test_chain_cache_hashes_only_new_blocks_and_never_changes_the_result() -> None:
    from gateway.routing.features import ChainCache, blocks_of, extract

    cache = ChainCache(max_bytes=1 << 20)

    def chained(body: dict) -> list[int]:
        return extract("chat", body, blocks=blocks_of(CFG.affinity), family_bytes=4096, expected_output_tokens=16, chains=cache).chain

    first, second = conversation(2), conversation(3)
    assert chained(first) == features(first).chain and cache.hits == 0
    assert chained(second) == features(second).chain and cache.hits == 1
    # A conversation that diverges (an edited earlier turn) is hashed from scratch.
    edited = conversation(3)
    edited["messages"][2]["content"] = "edited"
    assert chained(edited) == features(edited).chain and cache.hits == 1
    # Bounded: entries larger than the budget are not kept.
    tiny = ChainCache(max_bytes=100)
    canonical = b"x" * 1000
    small = Blocks(256, 0, 256)
    assert tiny.chain(1, canonical, small) == chain_hashes(canonical, small)
    assert tiny.chain(1, canonical, small) == chain_hashes(canonical, small) and tiny.hits == 0


def test_blocks_get_coarser_deep_in_a_long_history() -> None:
    blocks = Blocks(fine=512, coarse_after=4096, coarse=2048)
    assert [blocks.end(k) for k in (0, 1, 8, 9, 10)] == [0, 512, 4096, 6144, 8192]
    assert [blocks.count(n) for n in (511, 512, 4096, 6143, 6144, 9000)] == [0, 1, 8, 8, 9, 10]
    assert (blocks.tokens(7), blocks.tokens(8)) == (128, 512)
    canonical = bytes(range(256)) * 40  # 10,240 bytes: 8 fine blocks, then 3 coarse ones
    chain = chain_hashes(canonical, blocks)
    assert len(chain) == 11 == blocks.count(len(canonical))
    # Resuming from any block gives the same chain (what the chain cache relies on).
    for k in (3, 8, 9):
        assert chain_hashes(canonical, blocks, k, chain[k - 1], chain[:k]) == chain
    # Appending bytes never changes a full block's hash.
    assert chain_hashes(canonical + b"more" * 600, blocks)[:11] == chain


def test_capacity_counts_tokens_of_coarse_blocks() -> None:
    idx = AffinityIndex(blocks=Blocks(512, 1024, 2048), max_blocks=10_000, alpha=0.5)
    idx.configure("e", CacheProfile(ttl_s=100.0, capacity_tokens=2000))
    chain = list(range(1, 6))  # 2 fine blocks (128 tokens each), 3 coarse (512 each): 1792 tokens
    idx.insert("e", chain, 0)
    assert idx.held_tokens("e") == 1792 and idx.match("e", chain, 1) == 5
    idx.insert("e", [100, 101], 1)  # +256 tokens: over 2000, the oldest tail goes (a coarse block)
    assert idx.held_tokens("e") == 1792 + 256 - 512 and idx.match("e", chain, 2) == 4
    idx.truncate("e", chain[2:])
    assert idx.held_tokens("e") == 256 + 256 and idx.match("e", chain, 3) == 2


def test_residence_is_the_age_of_the_oldest_block_once_the_cache_evicts() -> None:
    idx = index(capacity_tokens=64 * 10)  # ten blocks
    a = features(conversation(3)).chain[:8]
    b = [h + 1 for h in a]
    idx.insert("e", a, 0)
    assert idx.residence("e", 5) is None  # room left: nothing is being evicted
    idx.insert("e", b, 2)  # over capacity: a's tail goes, a's head (touched at 0) is the oldest
    assert idx.residence("e", 5) == pytest.approx(5.0)
    idx.insert("e", a[:2], 4)  # touching the head: b (touched at 2) is now the oldest
    assert idx.residence("e", 5) == pytest.approx(3.0)
    assert idx.residence("other", 5) is None
    idx.forget("e")
    assert idx.residence("e", 5) is None
