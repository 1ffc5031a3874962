"""One upstream call: the HTTP client sends the request the adapter built, an error status becomes
the adapter's `ProviderError`, a complete answer is parsed by the adapter.

Shared by the dispatcher (`gateway.pipeline.dispatch`, user requests: retries, fallback and the
breaker's feedback around it) and the probe client (`probes.client`: none of those), so a probe's
request is built, sent and its failure classified exactly as a user's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from kernel.errors import ProviderServerError
from kernel.values import Operation
from providers.base import Adapter, ParsedBody, Target, UpstreamRequest
from providers.http import HTTPClient, Timeouts, UpstreamResponse

# An answer the adapters read (orjson: up to 1,024 levels deep) but cannot write back (255 levels),
# or walk (Python's recursion limit): a broken answer, the upstream's fault.
UNENCODABLE = (orjson.JSONEncodeError, RecursionError)


class Upstream(Protocol):
    """Where a call goes: `gateway.catalog.Endpoint` is one."""

    @property
    def id(self) -> str: ...

    @property
    def target(self) -> Target: ...

    @property
    def adapter(self) -> Adapter: ...


async def open_call(
    client: HTTPClient, timeouts: Timeouts, upstream: Upstream, request: UpstreamRequest
) -> UpstreamResponse:
    """The upstream's response with a success status, its body unread; an error status is read
    and raised as the adapter maps it (`upstream_status` set), as is a transport failure. The
    request comes built (`upstream.adapter.build_request`): the dispatcher counts its time as the
    gateway's own, the call's as waiting."""
    response = await client.send(request, timeouts, upstream.id)
    if response.status >= 400:
        raise upstream.adapter.map_error(upstream.target, response.status, response.headers, await response.read())
    return response


async def call(
    client: HTTPClient,
    timeouts: Timeouts,
    upstream: Upstream,
    op: Operation,
    request: UpstreamRequest,
    sent: Mapping[str, Any] | None = None,
) -> ParsedBody:
    """One non-streaming call: the adapter's parsed answer, or its `ProviderError`. `sent`: the body
    the request was built from, which some engines' answers are held to (`Adapter.parse_response`)."""
    response = await open_call(client, timeouts, upstream, request)
    body = await response.read()
    try:
        return upstream.adapter.parse_response(upstream.target, op, body, request=sent)
    except UNENCODABLE:
        raise ProviderServerError(
            f"upstream {upstream.id} answered with JSON nested too deep to pass on", endpoint=upstream.id
        ) from None
