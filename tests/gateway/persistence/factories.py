"""Builders for test data."""

from __future__ import annotations

from kernel.records import RequestRecord


def record(
    request_id: str = "req_1",
    *,
    key: str | None = "team-a",
    model: str = "m",
    endpoint: str | None = "p/m",
    status: int = 200,
    error: str | None = None,
    prompt: int = 100,
    cached: int = 40,
    completion: int = 10,
    cost: float = 0.001,
    ttft: float | None = None,
    latency: float = 0.05,
    overhead_ms: float = 0.1,
    stream: bool = False,
    api: str | None = "chat",
) -> RequestRecord:
    return RequestRecord(
        request_id=request_id,
        key_name=key,
        model=model,
        endpoint_id=endpoint,
        op="chat",
        stream=stream,
        attempts=1,
        status=status,
        error=error,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        cost_usd=cost,
        ttft_s=ttft,
        latency_s=latency,
        overhead_ms=overhead_ms,
        api=api,
    )
