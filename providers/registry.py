"""Provider kind -> adapter class. A name registry, not an if/elif chain."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.errors import ConfigError
from providers.anthropic import AnthropicAdapter
from providers.base import Adapter
from providers.llamacpp import LlamaCppAdapter
from providers.openai_compat import OpenAICompatAdapter

ADAPTERS: Mapping[str, type[Adapter]] = {
    "openai": OpenAICompatAdapter,
    "together": OpenAICompatAdapter,
    "fireworks": OpenAICompatAdapter,
    "deepinfra": OpenAICompatAdapter,
    "groq": OpenAICompatAdapter,
    "openrouter": OpenAICompatAdapter,
    "vllm": OpenAICompatAdapter,
    "sglang": OpenAICompatAdapter,
    "ollama": OpenAICompatAdapter,
    "llamacpp": LlamaCppAdapter,
    "anthropic": AnthropicAdapter,
}


def adapter_for(kind: str) -> Adapter:
    try:
        return ADAPTERS[kind]()
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ConfigError(f"config error: unknown provider kind {kind!r} (known: {known})") from None
