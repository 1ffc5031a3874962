"""Counting a chat prompt with the routed model's own tokenizer, where an endpoint of it can
(`providers.base.PromptCounting`: llama-server renders its chat template and tokenizes, Anthropic
counts at its count_tokens route). For
/v1/messages/count_tokens; the caller falls back to the gateway's estimate when none can.

Counting sends the whole prompt upstream, so an endpoint counts only where routing would let this
request reach it: the key's regions and data policy, the request's provider preferences, health
and breaker (`COUNTING_CHECKS`). Context window and rate headroom are left out: a prompt too long
for the window is what a client counts to find out, and a count is no generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.catalog import Endpoint
from gateway.routing.decision import Filtered
from gateway.routing.features import RequestFeatures
from gateway.routing.filters import (
    Check,
    apply_filters,
    check_breaker,
    check_data_policy,
    check_health,
    check_mode,
    check_preferences,
    check_region,
)
from gateway.routing.snapshot import Snapshot
from kernel.errors import ProviderServerError
from providers.base import PromptCounting
from providers.http import HTTPClient, Timeouts

MAX_STEPS = 4  # an adapter's steps; more is a bug in it, not a reason to loop


COUNTING_CHECKS: tuple[Check, ...] = (
    check_mode,
    check_region,
    check_data_policy,
    check_preferences,
    check_health,
    check_breaker,
)


def counting_endpoint(
    candidates: Sequence[Endpoint], features: RequestFeatures, snapshot: Snapshot
) -> tuple[Endpoint | None, list[Filtered]]:
    """The first ready candidate whose upstream counts prompts itself and that this request may
    reach, and the counting candidates ruled out (with routing's reasons)."""
    counting = [ep for ep in candidates if isinstance(ep.adapter, PromptCounting)]
    kept, ruled_out = apply_filters(counting, features, snapshot, COUNTING_CHECKS)
    return (kept[0] if kept else None), ruled_out


async def count_prompt(client: HTTPClient, timeouts: Timeouts, endpoint: Endpoint, body: dict[str, Any]) -> int:
    """The prompt's tokens as `endpoint`'s model counts them; a `ProviderError` when it cannot."""
    adapter = endpoint.adapter
    assert isinstance(adapter, PromptCounting)
    answer: bytes | None = None
    for step in range(MAX_STEPS):
        request = adapter.count_step(endpoint.target, body, step, answer)
        if isinstance(request, int):
            return request
        response = await client.send(request, timeouts, endpoint.id)
        try:
            answer = await response.read()
        finally:
            response.close()
        if response.status >= 400:
            raise endpoint.adapter.map_error(endpoint.target, response.status, response.headers, answer)
    raise ProviderServerError(
        f"upstream {endpoint.id} did not finish counting in {MAX_STEPS} steps", endpoint=endpoint.id
    )
