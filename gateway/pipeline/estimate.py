"""Usage the upstream never reported, estimated from what reached the client.

A committed answer without usage (an upstream that ignores include_usage, a stream that broke
after output went out, a client that left after finish_reason before the usage chunk) still cost
the upstream its prompt and what it generated: the accountant records this estimate instead of
nothing, and the limits stage settles on it, so such a request is not free. The relays count the
output text they pass on (`count_payloads`, `count_chunk`; a passed-through stream's events:
`count_events`); a whole answer is counted only when it
came without usage. Completion tokens are the larger of the pieces of text (an engine streams about
one token each) and 4 characters a token, capped at max_tokens for each completion asked for.
A usage that counts the output but not the prompt (`Usage.prompt_reported` false: a Messages
stream whose message_start never came) keeps its output's count, and its prompt is estimated; one
that counts the prompt but has no output count (`Usage.completion_reported` false: `completion_tokens`
left out) keeps its prompt's count, and its output is estimated from what reached the client
(`with_estimates`; a fan-out adds its uncounted parts' estimate to its counted parts' sum).
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
    """One chat or completions chunk (or whole answer): the text of each of its choices; a whole
    Messages answer passed through: the text, thinking and tool input of its content blocks; a
    whole Response passed through: its output items' text, reasoning and call arguments."""
    choices = obj.get("choices")
    if obj.get("type") == "message" and isinstance(blocks := obj.get("content"), list):
        _count_blocks(ctx, blocks)
    if obj.get("object") == "response" and isinstance(items := obj.get("output"), list):
        _count_items(ctx, items)
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


def _count_blocks(ctx: RequestContext, blocks: list[Any]) -> None:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        chars = sum(len(v) for name in ("text", "thinking", "name", "data") if isinstance(v := block.get(name), str))
        if "input" in block:  # tool_use, server_tool_use
            chars += len(orjson.dumps(block["input"]))
        if chars:
            ctx.output_chars += chars
            ctx.output_pieces += 1


# Where a Response's output items keep their text: message and reasoning parts, call arguments.
ITEM_FIELDS = ("text", "arguments", "name", "input", "code")


def _count_items(ctx: RequestContext, items: list[Any]) -> None:
    for item in items:
        if not isinstance(item, dict):
            continue
        parts = [item, *(p for key in ("content", "summary") if isinstance(ps := item.get(key), list) for p in ps)]
        chars = sum(len(v) for part in parts if isinstance(part, dict) for name in ITEM_FIELDS
                    if isinstance(v := part.get(name), str))
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


def routed_prompt_tokens(ctx: RequestContext) -> int | None:
    """The prompt's size as routing counted it (cl100k over the chat view), if the request was routed."""
    features = getattr(ctx.route, "features", None)
    return int(features.prompt_tokens) if features is not None else None


def _prompt(ctx: RequestContext) -> tuple[int, int]:
    """The prompt's tokens and cached tokens, for each upstream request it went in (a fan-out
    sends it once a part): the upstream's own count if it came before the output, else the
    route's estimate (cl100k over the chat view, as routing counted it)."""
    times = ctx.prompt_requests
    if ctx.prompt_usage is not None and ctx.prompt_usage.prompt_reported:
        return ctx.prompt_usage.prompt_tokens * times, ctx.prompt_usage.cached_tokens * times
    routed = routed_prompt_tokens(ctx)
    return (routed if routed is not None else len(str(ctx.body)) // 4 + 1) * times, 0


def counted_part(ctx: RequestContext, usage: Usage | None) -> Usage:
    """What the upstream itself counted of a usage the gateway estimated in part or whole: the
    prompt where it counted one (in the usage, or before the output: `ctx.prompt_usage`, once a
    request), the output it counted. Settlement charges this in full (gateway.limits)."""
    if usage is not None and usage.prompt_reported:
        prompt, cached = usage.prompt_tokens, usage.cached_tokens
    elif ctx.prompt_usage is not None and ctx.prompt_usage.prompt_reported:
        prompt, cached = _prompt(ctx)  # the upstream's count, once a request
    else:
        prompt, cached = 0, 0
    completion = usage.completion_tokens if usage is not None else 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def with_estimates(ctx: RequestContext, usage: Usage) -> Usage | None:
    """A usage that left a count out, with that count estimated: the prompt (once for each request
    it was sent in) where it counted none; where the output has no count, the estimate of the text
    the relays counted for it (all of it; a fan-out's: its uncounted parts') added to what it did
    count (a fan-out's counted parts). None where it counted all it should."""
    if usage.prompt_reported and (usage.completion_reported or ctx.op == "embeddings"):
        return None
    prompt, cached = (usage.prompt_tokens, usage.cached_tokens) if usage.prompt_reported else _prompt(ctx)
    extra = _completion(ctx) if not usage.completion_reported and ctx.op != "embeddings" else 0
    if extra == 0 and usage.prompt_reported:
        return None  # nothing was sent beyond what it counted
    completion = usage.completion_tokens + extra
    reported_cache = usage.cache_reported if usage.prompt_reported else False
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, cache_reported=reported_cache)


def _completion(ctx: RequestContext) -> int:
    completion = max(ctx.output_pieces, math.ceil(ctx.output_chars / CHARS_PER_TOKEN))
    features = getattr(ctx.route, "features", None)
    most = features.max_output_tokens if features is not None else None
    if most is not None:
        completion = min(completion, most * output_choices(ctx.op, ctx.body))
    return completion


def estimated_usage(ctx: RequestContext) -> Usage:
    prompt, cached = _prompt(ctx)
    if ctx.op == "embeddings":
        return Usage(prompt_tokens=prompt)
    return Usage(prompt_tokens=prompt, completion_tokens=_completion(ctx), cached_tokens=cached)
