"""OpenTelemetry traces of each request (`tracing.enabled`): a request observer, a peer of the
others (`gateway.pipeline.observe`), over a TracerProvider the app builds and closes. Off by
default, and then nothing here is imported: the SDK is an optional dependency (the `otel` extra)."""
