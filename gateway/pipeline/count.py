"""Counting a chat prompt with the routed model's own tokenizer, where an endpoint of it can
(`providers.base.PromptCounting`: llama-server renders its chat template and tokenizes, Anthropic
counts at its count_tokens route). For
/v1/messages/count_tokens; the caller falls back to the gateway's estimate when none can.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.catalog import Endpoint
from kernel.errors import ProviderServerError
from providers.base import PromptCounting
from providers.http import HTTPClient, Timeouts

MAX_STEPS = 4  # an adapter's steps; more is a bug in it, not a reason to loop


def counting_endpoint(candidates: Sequence[Endpoint]) -> Endpoint | None:
    """The first ready candidate whose upstream counts prompts itself."""
    return next((ep for ep in candidates if isinstance(ep.adapter, PromptCounting) and ep.is_ready()), None)


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
