"""Per-request state shared by the pipeline stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.routing import preferences
from gateway.routing.preferences import NO_PREFERENCES, ProviderPreferences
from kernel.deployment import NativeApi
from kernel.values import ClientApi, Operation, Usage

if TYPE_CHECKING:
    from gateway.routing.router import RouteTicket


# The gateway's own extension of a body (routing preferences): never sent to an upstream as is.
GATEWAY_FIELDS = ("provider",)


@dataclass(frozen=True, slots=True)
class NativeRequest:
    """The client's own request, for endpoints that take its API as is (`gateway.pipeline.native`)."""

    api: NativeApi
    body: Mapping[str, Any]
    # The client's headers the API's adapter may forward (anthropic-beta); never its key.
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, api: NativeApi, body: Mapping[str, Any], headers: Mapping[str, str]) -> NativeRequest:
        return cls(api, {k: v for k, v in body.items() if k not in GATEWAY_FIELDS}, headers)


@dataclass(slots=True)
class RequestContext:
    request_id: str
    op: Operation
    started: float  # the app clock (perf_counter) at arrival
    # The API the client spoke when it is not `op`'s own (Responses, Messages: both routed as chat).
    api: ClientApi | None = None
    key_name: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    stream: bool = False
    # The client's own body, for endpoints that take its API as is (`gateway.pipeline.native`).
    native: NativeRequest | None = None
    # The body's `provider` object, parsed once when the body is accepted (`accept`).
    prefs: ProviderPreferences = NO_PREFERENCES
    attempts: int = 0
    endpoint_id: str | None = None
    # Set when an endpoint produced the answer or its first stream event: no retries after it.
    committed: bool = False
    fail_open: str | None = None
    # Seconds spent waiting on upstreams or backing off: not the gateway's own overhead.
    waited: float = 0.0
    usage: Usage | None = None
    # The upstream reported no usage, or left a count out: `usage` is (in part) the estimate from
    # the output relayed (gateway.pipeline.estimate), whose text the relays count here...
    usage_estimated: bool = False
    # ...and this is what the upstream itself counted then (None: nothing), which settlement
    # charges in full where it caps the estimated rest at what was admitted.
    usage_counted: Usage | None = None
    # The prompt's exact usage reported before the final one (`ParsedChunk.prompt_usage`).
    prompt_usage: Usage | None = None
    # Upstream requests the prompt went in (a fan-out's parts): an estimated prompt counts each.
    prompt_requests: int = 1
    output_chars: int = 0
    output_pieces: int = 0
    ttft: float | None = None
    status: int = 200
    error: str | None = None
    # An upstream failure's detail, which the client does not see (for the record and the log).
    error_detail: str | None = None
    # Set to [] when response bodies are kept (persistence.store_bodies); stages append payloads.
    response_parts: list[bytes] | None = None
    # Routing: the decision's per-request state, its
    # explanation header, and body fields to add for particular endpoints (prompt_cache_key).
    route: RouteTicket | None = None
    route_header: str | None = None
    # The key's rate-limit headers (x-ratelimit-*), set by the limits stage at admission.
    rate_headers: dict[str, str] | None = None
    body_extra: dict[str, dict[str, Any]] | None = None
    # Set only when the request carries tools: gathers the response's calls for the passive
    # tool-call monitor (probes.toolcalls.trace.ToolTrace).
    tool_trace: Any = None
    # Only when tracing is on (gateway.tracing): the client's W3C `traceparent`, then the request's
    # spans, whose `upstream_headers` (the current attempt's traceparent) go with each upstream request.
    traceparent: str | None = None
    spans: Any = None

    def accept(self, body: dict[str, Any], prefs: ProviderPreferences | None = None) -> None:
        """Take the validated body; its routing preferences are parsed here (a 400 naming the bad
        field), unless a translation already parsed them, and the route stage reads `prefs`."""
        self.body, self.model, self.stream = body, body["model"], bool(body.get("stream"))
        if prefs is None:
            raw = body.get("provider")
            prefs = NO_PREFERENCES if raw is None else preferences.parse(raw)
        self.prefs = prefs

    def body_for(self, endpoint_id: str) -> dict[str, Any]:
        extra = self.body_extra.get(endpoint_id) if self.body_extra else None
        return {**self.body, **extra} if extra else self.body

    def overhead_ms(self, now: float) -> float:
        return max(0.0, (now - self.started - self.waited) * 1000.0)

    def response_headers(self, now: float) -> dict[str, str]:
        headers = {
            "x-request-id": self.request_id,
            "x-gateway-attempts": str(self.attempts),
            "x-gateway-overhead-ms": f"{self.overhead_ms(now):.3f}",
        }
        if self.endpoint_id:
            headers["x-gateway-endpoint"] = self.endpoint_id
        if self.fail_open:
            headers["x-gateway-fail-open"] = self.fail_open
        if self.route_header:
            headers["x-gateway-route"] = self.route_header
        if self.rate_headers:
            headers.update(self.rate_headers)
        return headers
