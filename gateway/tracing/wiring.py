"""Build the tracing the app owns: a TracerProvider (never the global one) exporting over OTLP/HTTP
through a batch processor, and the observer over its tracer; close it within the shutdown budget.

Everything is taken from the config slice, not from the `OTEL_*` environment variables the SDK
would otherwise read: the config is the one source of settings.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.tracing.observer import TracingObserver
from gateway.tracing.settings import TracingConfig
from kernel.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

TRACER_NAME = "llm-gateway"


class Tracing:
    """The provider and the observer over it; `aclose` exports what is queued and stops."""

    def __init__(self, provider: TracerProvider, observer: TracingObserver) -> None:
        self.provider = provider
        self.observer = observer

    async def aclose(self) -> None:
        """Shut the provider down (its last batch exported) in a daemon thread: the SDK blocks, and
        a collector that does not answer must not hold the loop, nor the process at exit, when the
        shutdown budget cuts this short."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not done.done():
                done.set_result(None)

        def shut_down() -> None:
            try:
                self.provider.shutdown()
            finally:
                try:
                    loop.call_soon_threadsafe(resolve)
                except RuntimeError:  # the loop closed meanwhile: nobody waits any more
                    pass

        threading.Thread(target=shut_down, name="otel-shutdown", daemon=True).start()
        await done


def build_tracing(cfg: TracingConfig, *, clock: Callable[[], float], exporter: SpanExporter | None = None) -> Tracing:
    """`exporter`: where spans go instead of the OTLP exporter (tests pass an in-memory one)."""
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        raise ConfigError(
            "config error: tracing.enabled needs the OpenTelemetry SDK: install the gateway's `otel` extra"
        ) from None
    if exporter is None:
        exporter = otlp_exporter(cfg)
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio)),
        resource=Resource({SERVICE_NAME: cfg.service_name}),
        shutdown_on_exit=False,  # the lifespan shuts it down, within its budget
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=cfg.max_queue_size,
            schedule_delay_millis=cfg.schedule_delay_s * 1000,
            max_export_batch_size=cfg.max_export_batch_size,
            export_timeout_millis=cfg.export_timeout_s * 1000,
        )
    )
    tracer = provider.get_tracer(TRACER_NAME)
    return Tracing(provider, TracingObserver(tracer, clock=clock, trust_incoming=cfg.trust_incoming))


def otlp_exporter(cfg: TracingConfig) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(
            "config error: tracing.enabled needs the OTLP/HTTP exporter: install the gateway's `otel` extra"
        ) from None
    return OTLPSpanExporter(
        endpoint=cfg.endpoint,
        headers={name: value.get_secret_value() for name, value in cfg.headers.items()},
        timeout=cfg.export_timeout_s,
        compression=Compression.Gzip if cfg.compression == "gzip" else Compression.NoCompression,
    )
