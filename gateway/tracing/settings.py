"""The tracing slice of the config (`tracing`): where spans go, and how many."""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from kernel.frozen import Frozen


class TracingConfig(Frozen):
    """Traces of each request exported over OTLP (HTTP/protobuf) in batches, off the hot path.
    Off by default; needs the `otel` extra (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)."""

    enabled: bool = False
    # The collector's OTLP/HTTP traces URL.
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    # Sent with every export (a vendor's API key): secret, never logged.
    headers: dict[str, SecretStr] = Field(default_factory=dict, repr=False)
    service_name: str = Field("llm-gateway", min_length=1)
    # The share of traces recorded among those that start here. A trusted client's traceparent
    # decides for its own trace (its sampled flag), as W3C parent-based sampling does.
    sample_ratio: float = Field(1.0, ge=0, le=1, allow_inf_nan=False)
    # Take the client's `traceparent` as the gateway span's parent, its sampled flag included. Off by
    # default: clients are untrusted, and one that may set the flag hides its requests from traces
    # (-00) or forces every one recorded (-01) and writes into any trace id. Turn it on when only
    # your own services (which send their own trace context) reach the gateway.
    trust_incoming: bool = False
    # One export's limit; the batch processor's queue (spans past it are dropped, never waited for),
    # batch size and interval.
    compression: Literal["gzip", "none"] = "gzip"
    export_timeout_s: float = Field(10.0, gt=0, le=120, allow_inf_nan=False)
    max_queue_size: int = Field(2048, ge=1)
    max_export_batch_size: int = Field(512, ge=1)
    schedule_delay_s: float = Field(5.0, gt=0, le=300, allow_inf_nan=False)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (the collector's OTLP/HTTP traces path)")
        return v

    @model_validator(mode="after")
    def _batch(self) -> TracingConfig:
        if self.max_export_batch_size > self.max_queue_size:
            raise ValueError("max_export_batch_size must not exceed max_queue_size")
        if self.enabled and (missing := missing_packages()):  # found, not imported: start-up stays light
            raise ValueError(f"enabled needs {' and '.join(missing)}: install the gateway's `otel` extra")
        return self


def missing_packages() -> list[str]:
    missing = []
    for package, module in (
        ("opentelemetry-sdk", "opentelemetry.sdk.trace"),
        ("opentelemetry-exporter-otlp-proto-http", "opentelemetry.exporter.otlp.proto.http"),
    ):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is absent (or only stubbed)
            found = False
        if not found:
            missing.append(package)
    return missing
