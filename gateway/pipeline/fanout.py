"""Fan-out: `n` > 1 on an endpoint that ignores `n` (``Capabilities.native_n`` is False).

One upstream request per choice (`providers.fanout` builds and merges them), sent one after the
other to the endpoint dispatch chose: a llama.cpp server runs one request at a time anyway, and
sequential parts each get the full timeouts. It is one attempt to dispatch, so retry and fallback
are unchanged:
- non-streaming: every part must answer, else the attempt fails as a whole;
- streaming: the attempt commits on the first part's first event, like any stream. The parts
  follow one another (choice 0's chunks, then choice 1's ...). A later part that fails becomes
  the stream's error event, never a clean end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.catalog import Endpoint
from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import count_payloads
from gateway.pipeline.outcome import Completed, Streaming
from kernel.errors import ProviderStreamError
from kernel.values import Usage
from providers.base import ParsedChunk
from providers.fanout import ChunkMerger, add_usages, merge_bodies, sub_bodies

Attempt = Callable[[RequestContext, Endpoint, dict[str, Any]], Awaitable[Completed | Streaming]]


def fan_out_count(ctx: RequestContext, endpoint: Endpoint) -> int:
    """How many requests this attempt needs: n if the endpoint ignores `n`, else 1."""
    n = ctx.body.get("n")
    if ctx.op == "embeddings" or not isinstance(n, int) or n <= 1 or endpoint.deployment.capabilities.native_n:
        return 1
    return n


async def fan_out(ctx: RequestContext, endpoint: Endpoint, n: int, attempt: Attempt) -> Completed | Streaming:
    bodies = sub_bodies(ctx.body_for(endpoint.id), n)
    ctx.prompt_requests = n
    if not ctx.stream:
        parts, usages = [], []
        for body in bodies:
            part = await attempt(ctx, endpoint, body)
            assert isinstance(part, Completed)
            parts.append(part.body)
            usages.append(ctx.usage)  # the part's own, as its adapter read it
        merged, _ = merge_bodies(parts)
        # The counters hold the text of the parts that counted no output, for the accountant's estimate
        # beside the counted parts' sum (dispatch also counted an earlier attempt's, whose other part failed).
        ctx.output_chars, ctx.output_pieces = 0, 0
        count_payloads(ctx, [b for b, u in zip(parts, usages, strict=True) if u is None or not u.completion_reported])
        ctx.usage = add_usages(usages)
        return Completed(merged)
    merger = ChunkMerger(wants_usage=bool((ctx.body.get("stream_options") or {}).get("include_usage")))
    ctx.usage, ctx.output_chars, ctx.output_pieces = None, 0, 0  # the relay counts this answer's parts
    first = await attempt(ctx, endpoint, bodies[0])
    assert isinstance(first, Streaming)
    rest = _parts(ctx, endpoint, first, bodies, attempt, merger)
    return Streaming(first.endpoint, merger.rewrite(first.first, 0), rest, False, first.response)


async def _parts(
    ctx: RequestContext,
    endpoint: Endpoint,
    first: Streaming,
    bodies: list[dict[str, Any]],
    attempt: Attempt,
    merger: ChunkMerger,
) -> AsyncIterator[ParsedChunk]:
    current = first
    usages: list[Usage | None] = []
    # The relay's count when the part began (part 0's first events: counted before this runs). A part
    # that counted its output takes its text back out: the counters keep the uncounted parts' only.
    mark = 0, 0
    usage: Usage | None = None
    pending = False  # a part has begun and is not in `usages` yet
    try:
        for part, body in enumerate(bodies):
            usage, pending = None, True
            if part:
                ttft, ctx.usage = ctx.ttft, None
                result = await attempt(ctx, endpoint, body)
                ctx.ttft = ttft  # the client's first token came with part 0
                assert isinstance(result, type(first))
                current = result
                if payloads := merger.rewrite(current.first, part):
                    yield ParsedChunk(payloads)
            usage = ctx.usage  # what the part's first events reported
            finished = current.done
            if not finished:
                async for chunk in current.rest:
                    usage = chunk.usage or usage
                    if payloads := merger.rewrite(chunk.payloads, part):
                        yield ParsedChunk(payloads)
                    if chunk.done:
                        finished = True
                        break
            if not finished:
                raise ProviderStreamError(
                    f"upstream {endpoint.id} closed the stream of choice {part} before it finished",
                    endpoint=endpoint.id,
                )
            usages.append(usage)
            pending = False
            if usage is not None and usage.completion_reported:
                ctx.output_chars, ctx.output_pieces = mark
            mark = ctx.output_chars, ctx.output_pieces
            merger.end_part()
            await _close(current)
        total = add_usages(usages)
        ctx.usage = total
        yield ParsedChunk(merger.closing(), usage=total, done=True)
    except BaseException:
        # A part failed, broke or the client left: the parts that finished keep their counts, and so
        # does the unfinished one where it counted its output (else its text counted is estimated).
        if pending and usage is not None and usage.completion_reported:
            ctx.output_chars, ctx.output_pieces = mark
        ctx.usage = add_usages([*usages, usage] if pending else usages)
        raise
    finally:
        await _close(current)


async def _close(streaming: Streaming) -> None:
    streaming.response.close()
    await streaming.rest.aclose()  # type: ignore[attr-defined]
