"""Pass-through: a client API the routed deployment's upstream speaks itself (`DeploymentConfig.native`).

An adapter may decline a body its upstream would not honour (`NativeAdapter.takes_natively`): that
attempt translates it. The route keeps the client's own body (`NativeRequest`) beside the internal chat view it built;
routing, limits and affinity read the chat view as for any request. Each attempt asks `takes`: an
endpoint whose deployment lists the client's API gets the client's body (`request`) and its answer
or events come back as they are (`Completed.native`, `Streaming.native`, framed by `PASSTHROUGH`);
any other endpoint of the same request is sent the chat view and translated back, as without it.
Retries and fallback before the first byte work across both kinds of endpoint alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.pipeline.context import NativeRequest, RequestContext
from gateway.pipeline.estimate import routed_prompt_tokens
from kernel.errors import GatewayError
from providers.base import NativeAdapter, ParsedBody, StreamTranslator, UpstreamRequest
from providers.call import open_call
from providers.http import HTTPClient, Timeouts

if TYPE_CHECKING:
    from gateway.catalog import Endpoint


def passes(native: NativeRequest | None, endpoint: Endpoint) -> bool:
    """Whether the endpoint takes this request as is: its deployment lists the API, and its adapter
    does not decline the body (`NativeAdapter.takes_natively`)."""
    if native is None or native.api not in endpoint.deployment.native:
        return False
    adapter = endpoint.adapter
    assert isinstance(adapter, NativeAdapter)  # the catalog checked it (`gateway.catalog`)
    return adapter.takes_natively(native.api, native.body)


def native_only(
    candidates: tuple[Endpoint, ...], refused: GatewayError, native: NativeRequest | None
) -> tuple[Endpoint, ...]:
    """The candidates that take the request as is; `refused` (why translating it failed) when none do."""
    kept = tuple(ep for ep in candidates if passes(native, ep))
    if not kept:
        raise refused
    return kept


def _adapter(ctx: RequestContext, endpoint: Endpoint) -> tuple[NativeRequest, NativeAdapter] | None:
    native = ctx.native
    if native is None or not passes(native, endpoint):
        return None
    adapter = endpoint.adapter
    assert isinstance(adapter, NativeAdapter)
    return native, adapter


def takes(ctx: RequestContext, endpoint: Endpoint) -> bool:
    """Whether this attempt passes the client's body through."""
    return _adapter(ctx, endpoint) is not None


def _pair(ctx: RequestContext, endpoint: Endpoint) -> tuple[NativeRequest, NativeAdapter]:
    pair = _adapter(ctx, endpoint)
    assert pair is not None  # only after `takes`
    return pair


def request(ctx: RequestContext, endpoint: Endpoint) -> UpstreamRequest:
    native, adapter = _pair(ctx, endpoint)
    return adapter.build_native(endpoint.target, native.api, native.body, ctx.stream, native.headers)


async def call(
    client: HTTPClient, timeouts: Timeouts, ctx: RequestContext, endpoint: Endpoint, built: UpstreamRequest
) -> ParsedBody:
    """A whole answer, as the upstream gave it, with its usage read (an error status: the adapter's
    `ProviderError`, as for any call)."""
    native, adapter = _pair(ctx, endpoint)
    response = await open_call(client, timeouts, endpoint, built)
    return adapter.parse_native(endpoint.target, native.api, await response.read())


def stream_translator(ctx: RequestContext, endpoint: Endpoint) -> StreamTranslator:
    native, adapter = _pair(ctx, endpoint)
    return adapter.native_stream(endpoint.target, native.api, prompt_hint=routed_prompt_tokens(ctx) or 0)


class PassThroughFraming:
    """The upstream's events are already the client's: written as they came, nothing added at the end."""

    @staticmethod
    def frame(payloads: list[bytes]) -> bytes:
        return b"".join(payloads)

    @staticmethod
    def end() -> bytes:
        return b""


PASSTHROUGH = PassThroughFraming()
