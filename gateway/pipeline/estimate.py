"""Usage the upstream never reported, estimated from what reached the client.

A committed answer without usage (an upstream that ignores include_usage, a stream that broke
after output went out, a client that left after finish_reason before the usage chunk) still cost
the upstream its prompt and what it generated: the accountant records this estimate instead of
nothing, and the limits stage settles on it, so such a request is not free. The relays count the
output text they pass on (`count_payloads`, `count_chunk`; a passed-through stream's events:
`count_events`); a whole answer is counted only when it
came without usage. Completion tokens are the larger of the pieces of text (an engine streams about
one token each) and 4 characters a token, capped at max_tokens for each completion asked for.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from gateway.pipeline.context import RequestContext
from gateway.routing.features import output_choices
from kernel.values import Usage

TEXT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal")
CHARS_PER_TOKEN = 4


def count_payloads(ctx: RequestContext, payloads: list[bytes]) -> None:
    for payload in payloads:
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            count_chunk(ctx, obj)


def count_chunk(ctx: RequestContext, obj: dict[str, Any]) -> None:
    """One chat or completions chunk (or whole answer): the text of each of its choices."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        chars = 0
        part = choice.get("delta") or choice.get("message")
        if isinstance(part, dict):
            for name in TEXT_FIELDS:
                if isinstance(text := part.get(name), str):
                    chars += len(text)
            calls = part.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    chars += sum(len(v) for v in (fn.get("name"), fn.get("arguments")) if isinstance(v, str))
        if isinstance(text := choice.get("text"), str):  # completions
            chars += len(text)
        if chars:
            ctx.output_chars += chars
            ctx.output_pieces += 1


# The text of a passed-through event: Messages' content_block_delta, Responses' response.*.delta.
DELTA_FIELDS = ("text", "partial_json", "thinking")
_DATA = b"data: "


def count_events(ctx: RequestContext, events: list[bytes]) -> None:
    """Whole SSE events (`event: ...\ndata: ...`) of a stream passed through as it came."""
    for event in events:
        start = event.find(_DATA)
        if start < 0:
            continue
        try:
            obj = orjson.loads(event[start + len(_DATA) :])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        delta = obj.get("delta")
        chars = 0
        if obj.get("type") == "content_block_delta" and isinstance(delta, dict):
            chars = sum(len(v) for name in DELTA_FIELDS if isinstance(v := delta.get(name), str))
        elif isinstance(kind := obj.get("type"), str) and kind.startswith("response.") and isinstance(delta, str):
            chars = len(delta)
        if chars:
            ctx.output_chars += chars
            ctx.output_pieces += 1


def estimated_usage(ctx: RequestContext) -> Usage:
    features = getattr(ctx.route, "features", None)
    prompt = int(features.prompt_tokens) if features is not None else len(str(ctx.body)) // 4 + 1
    cached = 0
    if ctx.prompt_usage is not None:  # the upstream's own count of the prompt came before the output
        prompt, cached = ctx.prompt_usage.prompt_tokens, ctx.prompt_usage.cached_tokens
    if ctx.op == "embeddings":
        return Usage(prompt_tokens=prompt)
    completion = max(ctx.output_pieces, math.ceil(ctx.output_chars / CHARS_PER_TOKEN))
    most = features.max_output_tokens if features is not None else None
    if most is not None:
        completion = min(completion, most * output_choices(ctx.op, ctx.body))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)
