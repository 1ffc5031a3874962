"""Config: YAML + GW_* env overrides, one-line errors naming the field, secrets kept secret."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import Settings, load_config
from gateway.pipeline.settings import GatewayKey, key_digest
from kernel.errors import ConfigError

PROVIDER_SECRET = "sk-provider-secret-value-1"
GATEWAY_SECRET = "sk-gateway-secret-value-2"
ADMIN_SECRET = "sk-admin-secret-value-3"

YAML = textwrap.dedent(
    """
    server:
      host: 0.0.0.0
      port: 8081
    retry:
      max_attempts: 4
    providers:
      - name: together
        kind: together
        base_url: https://api.together.example/v1/
        api_key_env: TOGETHER_KEY
        region: us
      - name: local-vllm
        kind: vllm
        base_url: http://127.0.0.1:8000/v1
    deployments:
      - model: llama-3.1-8b
        provider: together
        upstream_model: meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo
        price: {input: 0.18, output: 0.18}
      - model: llama-3.1-8b
        provider: local-vllm
        capabilities: {tools: false, max_top_logprobs: 5}
    """
)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(YAML)
    return path


def config_error(**kwargs: Any) -> str:
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# -- loading ----------------------------------------------------------------------------


def test_yaml(config_file: Path) -> None:
    settings = load_config(config_file, environ={"TOGETHER_KEY": PROVIDER_SECRET})

    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 8081)
    assert settings.retry.max_attempts == 4
    assert settings.retry.attempts_per_endpoint == 2  # default kept
    together, vllm = settings.providers
    assert together.base_url == "https://api.together.example/v1"  # trailing slash dropped
    assert together.api_key is not None and together.api_key.get_secret_value() == PROVIDER_SECRET
    assert vllm.api_key is None
    first, second = settings.deployments
    assert first.endpoint_id == "together/llama-3.1-8b"
    assert first.target_model == "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo"
    assert second.target_model == "llama-3.1-8b"
    assert second.capabilities.tools is False and second.capabilities.max_top_logprobs == 5
    assert first.price.cached == 0.18  # no cached price: the input price


def test_gw_config_names_the_file(config_file: Path) -> None:
    settings = load_config(environ={"GW_CONFIG": str(config_file), "TOGETHER_KEY": "k"})
    assert settings.server.port == 8081


def test_env_overrides_yaml_field_by_field(config_file: Path) -> None:
    settings = load_config(
        config_file,
        environ={
            "TOGETHER_KEY": "k",
            "GW_SERVER__PORT": "9000",
            "GW_RETRY__BACKOFF_BASE": "0.5",
            "GW_AUTH__ADMIN_KEY": ADMIN_SECRET,
        },
    )

    assert settings.server.port == 9000
    assert settings.server.host == "0.0.0.0"  # the rest of `server` still comes from the YAML
    assert settings.retry.backoff_base == 0.5
    assert settings.retry.max_attempts == 4
    assert settings.auth.admin_key is not None and settings.auth.admin_key.get_secret_value() == ADMIN_SECRET


def test_environ_is_the_only_env_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_SERVER__PORT", "1234")
    assert load_config(environ={}).server.port == 8080
    assert load_config().server.port == 1234  # default: the process environment


def test_keyword_overrides(config_file: Path) -> None:
    settings = load_config(config_file, environ={"TOGETHER_KEY": "k"}, server={"port": 7000})
    assert settings.server.port == 7000


def test_defaults_without_any_source() -> None:
    settings = load_config(environ={})
    assert settings.providers == () and settings.deployments == ()
    assert settings.server.port == 8080


def test_frozen() -> None:
    settings = load_config(environ={})
    with pytest.raises(ValidationError):
        settings.server.port = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        settings.retry = settings.retry  # type: ignore[misc]


# -- errors: one line, naming the field ----------------------------------------------------


def test_unknown_provider_in_a_deployment() -> None:
    message = config_error(
        providers=[{"name": "a", "base_url": "http://x"}],
        deployments=[{"model": "m", "provider": "a"}, {"model": "m", "provider": "nope"}],
    )
    assert message.startswith("config error: ")
    assert "deployments.1.provider" in message
    assert "'nope'" in message and "known: a" in message


@pytest.mark.parametrize("port", ["abc", "70000", "-1"])
def test_bad_port_from_env(port: str) -> None:
    message = config_error(environ={"GW_SERVER__PORT": port})
    assert message.startswith("config error: server.port: ")


def test_bad_port_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  port: http\n")
    assert config_error(path=path).startswith("config error: server.port: ")


@pytest.mark.parametrize("key", ["sha256:abc", "sha256:" + "g" * 64, "sha256:" + "a" * 65])
def test_bad_sha256_key(key: str) -> None:
    message = config_error(auth={"keys": [{"name": "a", "key": key}]})
    assert message.startswith("config error: auth.keys.0.key: ")
    assert "64 hex digits" in message
    assert key not in message


def test_short_key() -> None:
    message = config_error(auth={"keys": [{"name": "a", "key": "short"}]})
    assert message.startswith("config error: auth.keys.0.key: ")
    assert "short" not in message.removeprefix("config error: auth.keys.0.key: ")


def test_unknown_field() -> None:
    assert config_error(environ={"GW_SERVER__PROT": "1"}).startswith("config error: server.prot: ")
    assert config_error(retry={"attempts": 3}).startswith("config error: retry.attempts: ")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"providers": [{"name": "a", "base_url": "ftp://x"}]}, "providers.0.base_url"),
        ({"providers": [{"name": "bad name", "base_url": "http://x"}]}, "providers.0.name"),
        ({"timeouts": {"first_byte": 0}}, "timeouts.first_byte"),
        ({"breaker": {"failure_rate": 1.5}}, "breaker.failure_rate"),
        ({"deployments": [{"model": "m", "provider": "a", "price": {"input": -1}}]}, "deployments.0.price.input"),
        ({"engines": [{"kind": "external"}]}, "engines.0"),
    ],
)
def test_field_errors_name_the_field(overrides: dict[str, Any], field: str) -> None:
    assert config_error(**overrides).startswith(f"config error: {field}")


def test_duplicate_endpoint_id() -> None:
    message = config_error(
        providers=[{"name": "a", "base_url": "http://x"}],
        deployments=[{"model": "m", "provider": "a"}, {"model": "m", "provider": "a"}],
    )
    assert "duplicate endpoint id 'a/m'" in message


def test_duplicate_provider_name() -> None:
    message = config_error(providers=[{"name": "a", "base_url": "http://x"}, {"name": "a", "base_url": "http://y"}])
    assert "duplicate provider name 'a'" in message


def test_missing_api_key_env_names_the_variable_never_a_secret() -> None:
    message = config_error(
        environ={"OTHER_KEY": PROVIDER_SECRET, "GW_AUTH__ADMIN_KEY": ADMIN_SECRET},
        providers=[
            {"name": "a", "base_url": "http://x", "api_key_env": "OTHER_KEY"},
            {"name": "b", "base_url": "http://y", "api_key_env": "MISSING_KEY"},
        ],
        auth={"keys": [{"name": "k", "key": GATEWAY_SECRET}]},
    )
    assert "providers.1.api_key_env" in message
    assert "MISSING_KEY" in message
    for secret in (PROVIDER_SECRET, GATEWAY_SECRET, ADMIN_SECRET):
        assert secret not in message


def test_empty_api_key_env_counts_as_missing() -> None:
    message = config_error(
        environ={"EMPTY": ""}, providers=[{"name": "a", "base_url": "http://x", "api_key_env": "EMPTY"}]
    )
    assert "EMPTY" in message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  port: 1\n  host: [unclosed\n")
    message = config_error(path=path)
    assert str(path) in message and "line" in message and "invalid YAML" in message


def test_missing_file(tmp_path: Path) -> None:
    assert str(tmp_path / "none.yaml") in config_error(path=tmp_path / "none.yaml")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    assert "top level must be a mapping" in config_error(path=path)


def test_malformed_json_env_value_is_a_config_error() -> None:
    message = config_error(environ={"GW_PROVIDERS": "not json"})
    assert "providers" in message


# -- secrets ---------------------------------------------------------------------------------


def test_secrets_never_in_repr_str_or_json() -> None:
    settings = load_config(
        environ={"PROVIDER_KEY": PROVIDER_SECRET, "GW_AUTH__ADMIN_KEY": ADMIN_SECRET},
        providers=[{"name": "a", "base_url": "http://x", "api_key_env": "PROVIDER_KEY"}],
        auth={"keys": [{"name": "k", "key": GATEWAY_SECRET}]},
    )
    assert settings.providers[0].api_key is not None  # resolved...
    rendered = [
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        repr(settings.model_dump()),
        repr(settings.providers[0]),
    ]
    for text in rendered:
        for secret in (PROVIDER_SECRET, GATEWAY_SECRET, ADMIN_SECRET):
            assert secret not in text  # ...but never shown
    assert "PROVIDER_KEY" in repr(settings)  # the variable's name is fine


def test_settings_class_name() -> None:
    settings = load_config(environ={})
    assert isinstance(settings, Settings)
    assert repr(settings).startswith("Settings(")


# -- keys ------------------------------------------------------------------------------------


def test_key_digest() -> None:
    digest = hashlib.sha256(GATEWAY_SECRET.encode()).hexdigest()
    assert key_digest(GATEWAY_SECRET) == digest
    assert key_digest("sha256:" + digest.upper()) == digest
    assert GatewayKey(name="a", key=GATEWAY_SECRET).digest == GatewayKey(name="b", key="sha256:" + digest).digest  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"deployments": [{"model": "模型", "provider": "a"}]}, "deployments.0.model"),
        ({"deployments": [{"model": "m", "provider": "a", "id": "a/m\u2013eu"}]}, "deployments.0.id"),
        ({"deployments": [{"model": "m\r\nx-injected: 1", "provider": "a"}]}, "deployments.0.model"),
        ({"engines": [{"served_model_name": "smöll"}]}, "engines.0.served_model_name"),
    ],
)
def test_names_that_reach_reply_headers_must_be_printable_ascii(overrides: dict[str, Any], field: str) -> None:
    # Model names and endpoint ids go into x-gateway-endpoint / x-gateway-route: refused at load,
    # not a 500 after the upstream has been billed.
    message = config_error(providers=[{"name": "a", "base_url": "http://x"}], **overrides)
    assert message.startswith(f"config error: {field}")
    assert "printable ASCII" in message


def test_retry_after_block_limit_is_finite_and_positive() -> None:
    assert load_config(environ={}).retry.max_retry_after_block == 300.0
    assert config_error(retry={"max_retry_after_block": "inf"}).startswith("config error: retry.max_retry_after_block")
    assert config_error(retry={"max_retry_after_block": 0}).startswith("config error: retry.max_retry_after_block")


def test_durable_stored_responses_need_persistence() -> None:
    assert "needs persistence.enabled" in config_error(responses={"durable": True})
    assert load_config(environ={}, responses={"durable": True}, persistence={"enabled": True}).responses.durable
