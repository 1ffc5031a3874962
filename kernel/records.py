"""One finished request, as the accountant records it and the sinks (persistence) store it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    key_name: str | None
    model: str
    endpoint_id: str | None
    op: str
    stream: bool
    attempts: int
    status: int
    error: str | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_usd: float
    ttft_s: float | None
    latency_s: float
    overhead_ms: float
    # Only when the accountant keeps bodies (persistence.store_bodies): the parsed request, and the
    # response body (a stream's event payloads, one per line).
    request_body: object = None
    response_body: bytes | None = None
    # An upstream failure's detail (the client got a stable message and the request id).
    error_detail: str | None = None
    # No usage came from the upstream: the tokens and cost are the gateway's estimate from the
    # output it relayed (gateway.pipeline.estimate).
    usage_estimated: bool = False
    # The API the client spoke (`kernel.values.ClientApi`): `op` is what the gateway routed, which is
    # "chat" for a Responses or Messages request. None in records made before it was kept.
    api: str | None = None
