"""The catalog: endpoints built from config, indexed by public model name."""

from __future__ import annotations

import pytest

from gateway.catalog import Catalog, endpoints_from_settings
from gateway.config import load_config
from kernel.errors import ConfigError, ModelNotFound
from providers.llamacpp import LlamaCppAdapter
from tests.fakes.catalog import make_endpoint


def settings():  # type: ignore[no-untyped-def]
    return load_config(
        environ={"TOGETHER_KEY": "sk-together"},
        providers=[
            {
                "name": "together",
                "kind": "together",
                "base_url": "https://t.test/v1",
                "api_key_env": "TOGETHER_KEY",
                "region": "us",
                "headers": {"x-org": "1"},
            },
            {"name": "local", "kind": "llamacpp", "base_url": "http://127.0.0.1:8001/v1", "keeps_prompts": False},
        ],
        deployments=[
            {"model": "llama", "provider": "together", "upstream_model": "meta/llama"},
            {"model": "llama", "provider": "local", "id": "local-llama"},
            {"model": "qwen/qwen3", "provider": "local"},
        ],
    )


def test_endpoints_from_settings() -> None:
    together, local, qwen = endpoints_from_settings(settings())

    assert (together.id, together.model, together.provider, together.kind, together.region) == (
        "together/llama",
        "llama",
        "together",
        "together",
        "us",
    )
    assert together.target.base_url == "https://t.test/v1"
    assert (together.target.upstream_model, together.target.public_model) == ("meta/llama", "llama")
    assert together.target.api_key == "sk-together"
    assert together.target.extra_headers == {"x-org": "1"}
    assert local.id == "local-llama" and local.target.api_key is None
    assert isinstance(local.adapter, LlamaCppAdapter)
    assert qwen.id == "local/qwen/qwen3"
    assert all(ep.is_ready() for ep in (together, local, qwen))


def test_catalog_index() -> None:
    catalog = Catalog(endpoints_from_settings(settings()), created=5)
    assert catalog.models() == ["llama", "qwen/qwen3"]
    assert [ep.id for ep in catalog.candidates("llama")] == ["together/llama", "local-llama"]
    assert catalog.has_model("qwen/qwen3") and not catalog.has_model("nope")
    assert catalog.by_id["local-llama"].model == "llama"
    with pytest.raises(ModelNotFound) as info:
        catalog.candidates("nope")
    assert "`nope`" in info.value.message and info.value.param == "model"


def test_readiness_callback() -> None:
    flag = {"up": False}
    ep = make_endpoint("e/m", ready=lambda: flag["up"])
    assert not ep.is_ready()
    flag["up"] = True
    assert ep.is_ready()


def _native_settings(kind: str, native: list[str]):  # type: ignore[no-untyped-def]
    return load_config(
        providers=[{"name": "p", "kind": kind, "base_url": "https://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p", "native": native}],
    )


def test_native_apis_are_off_by_default_and_checked_against_the_provider_kind() -> None:
    [plain] = endpoints_from_settings(settings())[:1]
    assert plain.deployment.native == frozenset()
    [claude] = endpoints_from_settings(_native_settings("anthropic", ["messages"]))
    assert claude.deployment.native == {"messages"}
    [llama] = endpoints_from_settings(_native_settings("llamacpp", ["messages"]))  # llama-server serves it
    assert llama.deployment.native == {"messages"}
    with pytest.raises(ConfigError, match="provider kind 'openai' does not take the messages API as is"):
        endpoints_from_settings(_native_settings("openai", ["messages"]))
    with pytest.raises(ConfigError, match="deployments.0.native.0: Input should be 'messages' or 'responses'"):
        _native_settings("anthropic", ["completions"])


@pytest.mark.parametrize("kind", ["openai", "together", "fireworks", "deepinfra", "groq", "openrouter", "vllm", "sglang", "ollama"])
def test_openai_compatible_kinds_may_take_responses_as_is(kind: str) -> None:
    [ep] = endpoints_from_settings(_native_settings(kind, ["responses"]))
    assert ep.deployment.native == {"responses"}


@pytest.mark.parametrize("kind", ["llamacpp", "anthropic"])
def test_responses_as_is_is_refused_where_the_upstream_does_not_serve_it_well(kind: str) -> None:
    # llama-server serves /v1/responses, but its events lack sequence_number, output_index and
    # content_index, which the openai SDK's stream helper indexes by.
    with pytest.raises(ConfigError, match=f"provider kind '{kind}' does not take the responses API as is"):
        endpoints_from_settings(_native_settings(kind, ["responses"]))
