"""Provider kind -> adapter."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from providers.anthropic import AnthropicAdapter
from providers.llamacpp import LlamaCppAdapter
from providers.openai_compat import OpenAICompatAdapter
from providers.registry import ADAPTERS, adapter_for


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_every_kind_builds(kind: str) -> None:
    adapter = adapter_for(kind)
    if kind == "anthropic":  # the one upstream API that is not OpenAI's
        assert isinstance(adapter, AnthropicAdapter)
        return
    assert isinstance(adapter, OpenAICompatAdapter)
    assert isinstance(adapter, LlamaCppAdapter) == (kind == "llamacpp")


def test_each_call_gets_its_own_adapter() -> None:
    assert adapter_for("openai") is not adapter_for("openai")


def test_unknown_kind() -> None:
    with pytest.raises(ConfigError) as info:
        adapter_for("anthropicx")
    assert "'anthropicx'" in str(info.value) and "llamacpp" in str(info.value)
