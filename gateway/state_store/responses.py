"""Stored Responses API state (`store: true`): the response, its input items and the conversation
that `previous_response_id` continues, per gateway key, with a TTL.

It lives in the state store's key/value space, so its backend is the one the replicas already
share: `redis` for replicas on several hosts (every replica reads what any other stored), `memory`
for one process (and, one instance shared, for tests that model replicas). One contract suite
covers both (tests/gateway/state_store/test_responses_store.py).

Durable copy (`responses.durable`, with persistence on): an `Archive` (the database,
`gateway.persistence.responses`) also gets each stored response, written behind (never awaited
on the request), and is read when the state store misses or does not answer: what outlives a
Redis restart or eviction. The state store stays the shared, immediate copy: a write-behind one
is not readable on another replica at once (README, "Stored responses").

Per-key isolation: the storage key holds a digest of the owner (the gateway key's name), so
another key asking for the same id finds nothing, which is a 404 as at OpenAI, not a 403 that
would confirm the id exists.

Size: one stored response may take `max_bytes` (`responses.max_stored_bytes`); a bigger one is not
stored (`gateway.pipeline.responses.keep` says so in the answer), which also bounds a
`previous_response_id` chain, since each stored response holds the whole conversation so far.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.state_store.base import StoreUnavailable

# Ids the gateway makes are `resp_` + 48 hex; anything outside this shape cannot be stored here.
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class KeyValue(Protocol):
    """What the state store backends (`MemoryStore`, `RedisStore`) offer for this."""

    async def kv_get(self, key: str) -> bytes | None: ...

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def kv_delete(self, key: str) -> bool: ...


@dataclass(slots=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    # The chat messages up to and including this response's output (instructions excluded).
    conversation: list[dict[str, Any]]
    # The same as Responses items, as sent to and answered by an upstream that takes Responses as is
    # (`native: [responses]`): what it is sent when continued there (None: only the chat view is kept).
    items: list[dict[str, Any]] | None = None

    @property
    def id(self) -> str:
        return str(self.response["id"])


class Archive(Protocol):
    """A durable second copy, keyed like the state store (`gateway.persistence.responses`)."""

    def keep(self, key: str, body: bytes, ttl_s: float) -> None:
        """Queue it to be written; never waits."""

    async def fetch(self, key: str) -> bytes | None:
        """The body, unless missing, expired or the archive is unreachable."""

    async def forget(self, key: str) -> bool:
        """Drop it (and a queued write of it); whether there was one."""


class ResponseStore:
    def __init__(self, kv: KeyValue, *, ttl_s: float, max_bytes: int, archive: Archive | None = None) -> None:
        self._kv = kv
        self.ttl_s = ttl_s
        # The most one stored response (with its input items and conversation) may take.
        self.max_bytes = max_bytes
        self._archive = archive

    @staticmethod
    def _key(owner: str | None, response_id: str) -> str:
        digest = hashlib.sha256((owner or "").encode()).hexdigest()[:32]
        return f"responses:{digest}:{response_id}"

    async def put(self, owner: str | None, stored: StoredResponse) -> int | None:
        """Store it; None when stored, else its size in bytes, over `max_bytes` (nothing is stored)."""
        kept = {"response": stored.response, "input_items": stored.input_items, "conversation": stored.conversation}
        if stored.items is not None:
            kept["items"] = stored.items
        body = orjson.dumps(kept)
        if len(body) > self.max_bytes:
            return len(body)
        key = self._key(owner, stored.id)
        if self._archive is not None:  # first: it holds the response even when the state store is away
            self._archive.keep(key, body, self.ttl_s)
        await self._kv.kv_put(key, body, self.ttl_s)
        return None

    async def get(self, owner: str | None, response_id: str) -> StoredResponse | None:
        if not _ID.fullmatch(response_id):
            return None
        key = self._key(owner, response_id)
        try:
            raw = await self._kv.kv_get(key)
        except StoreUnavailable:
            if self._archive is None or (raw := await self._archive.fetch(key)) is None:
                raise  # not known to be missing: the caller says "retry", not "not found"
        if raw is None and self._archive is not None:
            raw = await self._archive.fetch(key)
        if raw is None:
            return None
        obj = orjson.loads(raw)
        return StoredResponse(obj["response"], obj["input_items"], obj["conversation"], obj.get("items"))

    async def delete(self, owner: str | None, response_id: str) -> bool:
        if not _ID.fullmatch(response_id):
            return False
        key = self._key(owner, response_id)
        archived = await self._archive.forget(key) if self._archive is not None else False
        return await self._kv.kv_delete(key) or archived
