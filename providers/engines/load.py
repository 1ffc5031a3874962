"""How loaded a llama-server replica is, read from its own ``/metrics`` and ``/slots``.

``/metrics`` (Prometheus text, ``--metrics``) gives ``llamacpp:requests_processing`` and
``llamacpp:requests_deferred`` (requests waiting for a free slot: the engine's queue). ``/slots``
(``--slots``) lists each slot with ``is_processing``, its context ``n_ctx`` and the tokens it holds
(``n_prompt_tokens`` plus ``next_token[0].n_decoded``); the KV usage is what busy slots hold over
all slots' cells, as vLLM counts blocks held by running requests (a finished slot's tokens are
cache, free to be overwritten, and do not count).

`read_load` does the two GETs; the parsers are pure. Any answer that does not parse is a
`LoadUnreadable`, which the supervisor logs once and treats as "unknown", never as down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

_PROCESSING = "llamacpp:requests_processing"
_DEFERRED = "llamacpp:requests_deferred"
# Bounds what a misbehaving engine can make the poller hold in memory.
_MAX_BODY = 1 << 20


class LoadUnreadable(Exception):
    """The engine's /metrics or /slots answer could not be read."""


@dataclass(frozen=True, slots=True)
class EngineLoad:
    processing: int  # requests being decoded
    deferred: int  # requests waiting for a slot
    slots: int  # slots the engine has
    kv_usage: float  # 0..1: cells held by busy slots / all cells
    read_at: float  # when it was read (the supervisor's clock)

    @property
    def queued(self) -> int:
        """Requests the engine has accepted: decoding plus waiting."""
        return self.processing + self.deferred


def parse_metrics(text: str) -> tuple[int, int]:
    """(processing, deferred) from llama-server's /metrics."""
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (_PROCESSING, _DEFERRED):
                    found[sample.name] = sample.value
    except ValueError as exc:
        raise LoadUnreadable(f"/metrics: {exc}") from None
    if _PROCESSING not in found or _DEFERRED not in found:
        raise LoadUnreadable("/metrics has no llamacpp:requests_processing/requests_deferred")
    return max(0, int(found[_PROCESSING])), max(0, int(found[_DEFERRED]))


def parse_slots(slots: Any) -> tuple[int, float]:
    """(slot count, KV usage) from llama-server's /slots."""
    if not isinstance(slots, list) or not slots or not all(isinstance(s, dict) for s in slots):
        raise LoadUnreadable("/slots is not a list of slots")
    cells = 0
    held = 0
    for slot in slots:
        n_ctx = slot.get("n_ctx")
        if not isinstance(n_ctx, int) or n_ctx <= 0:
            raise LoadUnreadable("/slots: a slot without n_ctx")
        cells += n_ctx
        if slot.get("is_processing") is True:
            held += min(n_ctx, _slot_tokens(slot))
    return len(slots), held / cells


def _slot_tokens(slot: dict[str, Any]) -> int:
    prompt = slot.get("n_prompt_tokens")
    tokens = prompt if isinstance(prompt, int) and prompt > 0 else 0
    next_token = slot.get("next_token")
    if isinstance(next_token, list) and next_token and isinstance(next_token[0], dict):
        decoded = next_token[0].get("n_decoded")
        if isinstance(decoded, int) and decoded > 0:
            tokens += decoded
    return tokens


async def read_load(client: httpx.AsyncClient, root_url: str, now: float) -> EngineLoad:
    """GET /metrics and /slots of the replica at `root_url` (no /v1)."""
    metrics = await _get(client, root_url + "/metrics")
    slots_body = await _get(client, root_url + "/slots")
    processing, deferred = parse_metrics(metrics.decode("utf-8", "replace"))
    try:
        slots = orjson.loads(slots_body)
    except orjson.JSONDecodeError:
        raise LoadUnreadable("/slots is not JSON") from None
    count, kv_usage = parse_slots(slots)
    return EngineLoad(processing, deferred, count, kv_usage, now)


async def _get(client: httpx.AsyncClient, url: str) -> bytes:
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise LoadUnreadable(f"{url.rsplit('/', 1)[-1]}: HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > _MAX_BODY:
                    raise LoadUnreadable(f"{url.rsplit('/', 1)[-1]}: answer over {_MAX_BODY} bytes")
            return bytes(body)
    except httpx.HTTPError as exc:
        raise LoadUnreadable(f"{url.rsplit('/', 1)[-1]}: {type(exc).__name__}") from None
