"""The tracing slice of the config: off by default, set from YAML or GW_TRACING__*, validated, secret headers."""

from __future__ import annotations

import sys

import pytest

from gateway.config import load_config
from gateway.tracing.settings import TracingConfig
from kernel.errors import ConfigError


def test_off_by_default() -> None:
    cfg = load_config(environ={}).tracing
    assert cfg == TracingConfig()
    assert not cfg.enabled and cfg.sample_ratio == 1.0 and not cfg.trust_incoming


def test_from_the_environment() -> None:
    cfg = load_config(
        environ={
            "GW_TRACING__ENABLED": "true",
            "GW_TRACING__ENDPOINT": "https://collector.example:4318/v1/traces",
            "GW_TRACING__HEADERS": '{"x-api-key": "sk-collector-secret-1"}',
            "GW_TRACING__SERVICE_NAME": "gw-eu",
            "GW_TRACING__SAMPLE_RATIO": "0.25",
        }
    ).tracing
    assert cfg.enabled and cfg.endpoint == "https://collector.example:4318/v1/traces"
    assert (cfg.service_name, cfg.sample_ratio) == ("gw-eu", 0.25)
    assert cfg.headers["x-api-key"].get_secret_value() == "sk-collector-secret-1"
    assert "sk-collector-secret-1" not in repr(cfg) + str(cfg.model_dump())


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("endpoint", "collector:4318", "must be an http:// or https:// URL"),
        ("sample_ratio", 1.5, "less than or equal to 1"),
        ("sample_ratio", -0.1, "greater than or equal to 0"),
        ("max_export_batch_size", 4096, "must not exceed max_queue_size"),
        ("compression", "zstd", "'gzip' or 'none'"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_field(field: str, value: object, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={}, tracing={"enabled": True, field: value})
    message = str(info.value)
    assert message.startswith("config error: tracing") and why in message
    assert "\n" not in message


def test_tracing_on_without_the_sdk_stops_start_up_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)  # as if not installed

    with pytest.raises(ConfigError) as info:
        load_config(environ={"GW_TRACING__ENABLED": "true"})
    assert str(info.value) == (
        "config error: tracing: enabled needs opentelemetry-exporter-otlp-proto-http: install the gateway's `otel` extra"
    )
    assert not load_config(environ={}).tracing.enabled  # off, nothing is looked for
