"""Per-request state shared by the pipeline stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from providers.base import Operation, Usage


@dataclass(slots=True)
class RequestContext:
    request_id: str
    op: Operation
    started: float  # the app clock (perf_counter) at arrival
    key_name: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    stream: bool = False
    attempts: int = 0
    endpoint_id: str | None = None
    fail_open: str | None = None
    # Seconds spent waiting on upstreams or backing off: not the gateway's own overhead.
    waited: float = 0.0
    usage: Usage | None = None
    ttft: float | None = None
    status: int = 200
    error: str | None = None

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
        return headers
