"""What routing needs to know about one request, computed once, without tokenizing.

The affinity chain hashes the canonical (model, tools, messages) prefix: one orjson pass with
sorted keys and tools sorted by name, cut into fixed-size blocks (256 bytes, about 64 tokens);
block i's hash is xxh3_64 of the block seeded with block i-1's hash, so a hash names its whole
prefix. Only full blocks are hashed: appending a turn leaves every earlier block's hash as it was.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import orjson
import xxhash

from gateway.routing import capabilities
from gateway.routing.preferences import NO_PREFERENCES, ProviderPreferences
from gateway.routing.settings import AffinitySettings, KeyPolicy
from gateway.routing.tokens import ASCII_BYTES_PER_TOKEN, OTHER_BYTES_PER_TOKEN

_SORTED = orjson.OPT_SORT_KEYS
DEFAULT_KEY_POLICY = KeyPolicy()
_hash = xxhash.xxh3_64_intdigest


@dataclass(frozen=True, slots=True)
class Blocks:
    """Where the chain's blocks end: `fine` bytes each for the first `coarse_after` bytes, then
    `coarse` bytes each. Deep in a long history, 2 KB blocks (about 512 tokens) predict a hit as
    well as 512-byte ones, for a quarter of the hashing and of the index memory."""

    fine: int = 512
    coarse_after: int = 32768
    coarse: int = 2048

    @property
    def fine_blocks(self) -> int:
        return self.coarse_after // self.fine

    def end(self, blocks: int) -> int:
        """Bytes covered by the first `blocks` blocks."""
        n = self.fine_blocks
        return blocks * self.fine if blocks <= n else n * self.fine + (blocks - n) * self.coarse

    def count(self, size: int) -> int:
        """Full blocks within the first `size` bytes."""
        n = self.fine_blocks
        if size <= n * self.fine:
            return size // self.fine
        return n + (size - n * self.fine) // self.coarse

    def tokens(self, index: int) -> int:
        """About how many tokens block `index` holds (4 bytes a token)."""
        return (self.fine if index < self.fine_blocks else self.coarse) // 4


DEFAULT_BLOCKS = Blocks()


def blocks_of(settings: AffinitySettings) -> Blocks:
    return Blocks(settings.block_bytes, settings.coarse_after_bytes, settings.coarse_block_bytes)


@dataclass(slots=True)
class RequestFeatures:
    op: str
    model: str
    est_prompt_tokens: int
    # max_completion_tokens / max_tokens when set.
    max_output_tokens: int | None
    # What cost and decode time assume.
    expected_output_tokens: int
    # Capabilities the body needs: "tools", "logprobs"; and the top_logprobs it asks for
    # (`gateway.routing.capabilities`).
    needs: frozenset[str] = frozenset()
    top_logprobs: int = 0
    # The body's parameter names (a keys view: no copy).
    params: AbstractSet[str] = frozenset()
    # The affinity chain (block hashes), and the canonical length it was cut from.
    chain: list[int] = field(default_factory=list)
    canonical_bytes: int = 0
    blocks: Blocks = DEFAULT_BLOCKS
    # Stable over a conversation's turns: consistent-hash key and prompt_cache_key seed.
    family: int = 0
    # Full chain blocks within the family prefix: chain[family_blocks] is the first block that
    # tells conversations of one family apart (0 when the client gave its own prompt_cache_key).
    family_blocks: int = 0
    prefs: ProviderPreferences = NO_PREFERENCES
    key_policy: KeyPolicy = field(default_factory=KeyPolicy)
    key_name: str | None = None
    # Set when the context-window check needed an exact count.
    exact_prompt_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.exact_prompt_tokens if self.exact_prompt_tokens is not None else self.est_prompt_tokens

    def matched_tokens(self, blocks: int) -> int:
        """Prompt tokens covered by the first `blocks` blocks of the chain."""
        if blocks <= 0 or not self.canonical_bytes:
            return 0
        return min(self.prompt_tokens, int(self.prompt_tokens * self.blocks.end(blocks) / self.canonical_bytes))

    def blocks_for_tokens(self, tokens: int, reported_prompt_tokens: int | None = None) -> int:
        """How many chain blocks `tokens` prompt tokens cover (for cached-token feedback)."""
        total = reported_prompt_tokens or self.prompt_tokens
        if tokens <= 0 or total <= 0 or not self.chain:
            return 0
        covered = int(self.canonical_bytes * min(1.0, tokens / total))
        return min(len(self.chain), self.blocks.count(covered))


def _ascii(value: Any) -> bool:
    # str.isascii() is O(1) in CPython (compact strings carry the flag).
    if isinstance(value, str):
        return value.isascii()
    if isinstance(value, list):
        return all(p.get("text", "").isascii() for p in value if isinstance(p, dict) and isinstance(p.get("text", ""), str))
    return True


def _estimate(size: int, ascii_text: bool) -> int:
    return int(size / (ASCII_BYTES_PER_TOKEN if ascii_text else OTHER_BYTES_PER_TOKEN)) + 1 if size else 0


def chain_hashes(
    canonical: bytes, blocks: Blocks, start: int = 0, prev: int = 0, into: list[int] | None = None
) -> list[int]:
    """The hashes of blocks `start`, `start`+1... of `canonical`, the first seeded with `prev` (the
    hash of the block before it), appended to `into`."""
    view = memoryview(canonical)
    out: list[int] = into if into is not None else []
    append = out.append
    size = len(canonical)
    first = blocks.end(start)
    coarse_from = blocks.fine_blocks * blocks.fine
    step = blocks.fine
    for offset in range(first, min(size, coarse_from) - step + 1, step):
        prev = _hash(view[offset : offset + step], prev)
        append(prev)
    step = blocks.coarse
    for offset in range(max(first, coarse_from), size - step + 1, step):
        prev = _hash(view[offset : offset + step], prev)
        append(prev)
    return out


class ChainCache:
    """The last chain of each conversation (by family), so a new turn hashes only its new blocks:
    agents resend the whole history every turn. Bounded by bytes, least recently used first out.
    A hit is checked byte for byte (one memcmp), so it never changes the result, only its cost."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[bytes, list[int]]] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def chain(self, family: int, canonical: bytes, blocks: Blocks) -> list[int]:
        entry = self._entries.get(family) if family else None
        if entry is not None and len(entry[0]) <= len(canonical) and canonical.startswith(entry[0]):
            _, known = entry
            self.hits += 1
            chain = chain_hashes(canonical, blocks, len(known), known[-1] if known else 0, list(known))
        else:
            chain = chain_hashes(canonical, blocks)
        if family and self.max_bytes and len(chain) > 1:
            self._put(family, canonical[: blocks.end(len(chain))], chain)
        return chain

    def _put(self, family: int, prefix: bytes, chain: list[int]) -> None:
        old = self._entries.pop(family, None)
        if old is not None:
            self._bytes -= len(old[0])
        if len(prefix) > self.max_bytes:
            return
        self._entries[family] = (prefix, chain)
        self._bytes += len(prefix)
        while self._bytes > self.max_bytes:
            _, (dropped, _) = self._entries.popitem(last=False)
            self._bytes -= len(dropped)


def _chat_canonical(model: str, body: dict[str, Any]) -> tuple[bytes, bytes, bool]:
    """(header + messages, the family prefix, all text ASCII)."""
    tools = body.get("tools")
    if tools:
        tools = sorted(tools, key=lambda t: str((t.get("function") or {}).get("name", "")) if isinstance(t, dict) else "")
    header = orjson.dumps([model, tools or []], option=_SORTED)
    messages = body.get("messages") or []
    canonical = header + orjson.dumps(messages, option=_SORTED)
    # The family: system/developer turns and the first user turn: the same on every later turn.
    first_user = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), 0)
    family = header + orjson.dumps(messages[: first_user + 1], option=_SORTED) if first_user + 1 < len(messages) else canonical
    ascii_text = all(_ascii(m.get("content")) for m in messages if isinstance(m, dict))
    return canonical, family, ascii_text


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def output_choices(op: str, body: dict[str, Any]) -> int:
    """How many completions a request may generate, each up to max_tokens: `n` for chat; for
    completions, `max(n, best_of)` (best_of are generated, n of them returned) for each prompt of
    a prompt array (of strings, or of token arrays)."""
    n = _count(body.get("n"))
    if op != "completions":
        return n
    prompt = body.get("prompt")
    prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    return max(n, _count(body.get("best_of"))) * prompts


def extract(
    op: str,
    body: dict[str, Any],
    *,
    blocks: Blocks,
    family_bytes: int,
    expected_output_tokens: int,
    prefs: ProviderPreferences = NO_PREFERENCES,
    key_policy: KeyPolicy = DEFAULT_KEY_POLICY,
    key_name: str | None = None,
    chains: ChainCache | None = None,
    hash_chain: bool = True,
) -> RequestFeatures:
    model = str(body.get("model", ""))
    needs, top = capabilities.requested(op, body)
    chain: list[int] | None
    if op == "chat":
        canonical, family_src, ascii_text = _chat_canonical(model, body)
        chain = None
    elif op == "completions":
        prompt = body.get("prompt")
        canonical = orjson.dumps([model, prompt])
        family_src = canonical
        ascii_text = not isinstance(prompt, str) or prompt.isascii()
        chain = None
    else:  # embeddings: no prefix cache to aim at
        canonical = orjson.dumps(body.get("input"))
        family_src = b""
        ascii_text = True
        chain = []
    out = body.get("max_completion_tokens") or body.get("max_tokens")
    max_out = int(out) if isinstance(out, int) and not isinstance(out, bool) else None
    n = output_choices(op, body)
    expected = 0 if op == "embeddings" else (min(max_out, expected_output_tokens) if max_out else expected_output_tokens) * n
    client_key = body.get("prompt_cache_key")
    if isinstance(client_key, str) and client_key:
        family_seed, family_blocks = client_key.encode(), 0
    else:
        family_seed = family_src[:family_bytes]
        family_blocks = blocks.count(len(family_seed))
    family = _hash(family_seed) if family_seed else 0
    if not hash_chain:
        chain = []
    elif chain is None:
        chain = chains.chain(family, canonical, blocks) if chains is not None else chain_hashes(canonical, blocks)
    return RequestFeatures(
        op=op,
        model=model,
        est_prompt_tokens=_estimate(len(canonical), ascii_text),
        max_output_tokens=max_out,
        expected_output_tokens=expected,
        needs=needs,
        top_logprobs=top,
        params=body.keys(),
        chain=chain,
        canonical_bytes=len(canonical),
        blocks=blocks,
        family=family,
        family_blocks=family_blocks,
        prefs=prefs,
        key_policy=key_policy,
        key_name=key_name,
    )
