"""What a deployment is: a public model on a provider, its price, capabilities and routing hints.

Plain frozen values; the catalog (`gateway.catalog`) turns them into endpoints, and the local
engines' config (`providers.engines.config`) embeds the same price, capabilities and hints.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from kernel.frozen import Frozen
from kernel.values import Operation

# The operations a deployment may serve (the same names as a request's operation).
Mode = Operation
# Client APIs an upstream may take as is (`DeploymentConfig.native`): Anthropic's Messages, OpenAI's Responses.
NativeApi = Literal["messages", "responses"]


class Price(Frozen):
    """USD per 1M tokens."""

    input: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(0.0, ge=0)

    @property
    def cached(self) -> float:
        return self.input if self.cached_input is None else self.cached_input


class Capabilities(Frozen):
    modes: frozenset[Mode] = frozenset({"chat", "completions"})
    tools: bool = True
    logprobs: bool = True
    max_top_logprobs: int = Field(20, ge=0, le=20)
    # Whether the upstream honours `n` > 1 itself. When False (llama.cpp's server ignores `n`),
    # dispatch fans the request out n times and merges the answers (gateway.pipeline.fanout).
    native_n: bool = True
    # Without native `n`, each choice is one more upstream request: a larger `n` is a 400.
    max_fanout_n: int = Field(8, ge=1, le=128)


CacheKind = Literal["auto", "none", "engine", "openai", "anthropic", "deepseek", "gemini"]


class CacheSettings(Frozen):
    """How an endpoint's prefix cache behaves. `auto` picks a profile from the provider kind
    (`gateway.routing.affinity.CACHE_PROFILES`); any field set here overrides the profile."""

    kind: CacheKind = "auto"
    ttl_s: float | None = Field(None, gt=0)
    capacity_tokens: int | None = Field(None, ge=0)
    min_tokens: int | None = Field(None, ge=0)
    step_tokens: int | None = Field(None, ge=1)
    # Whether the endpoint reports cached tokens in its usage.
    reports: bool | None = None
    # Whether to send `prompt_cache_key` (OpenAI's cache routing hint).
    prompt_cache_key: bool | None = None


class DeploymentRouting(Frozen):
    """What routing knows about one deployment beyond its price and capabilities."""

    # Requests it serves at once without queueing (a llama.cpp replica: 1). None: elastic (cloud),
    # its queueing shows only in the observed TTFT.
    slots: int | None = Field(None, ge=1)
    # The upstream's own limits for this deployment (our account's quota).
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # Priors until observations arrive: TTFT of a tiny prompt, prefill and decode rates.
    ttft_s: float | None = Field(None, gt=0)
    prefill_tps: float | None = Field(None, gt=0)
    decode_tps: float | None = Field(None, gt=0)
    # A static quality multiplier (the probes' score multiplies it).
    quality: float = Field(1.0, gt=0, le=1)
    cache: CacheSettings = CacheSettings()
    # Request parameters this deployment ignores (checked with provider.require_parameters).
    unsupported_params: tuple[str, ...] = ()


def header_safe(v: str | None) -> str | None:
    """Model names and endpoint ids are sent back in reply headers (x-gateway-endpoint, x-gateway-route)."""
    if v is not None and not (v.isascii() and v.isprintable()):
        raise ValueError("must be printable ASCII (it is sent in reply headers)")
    return v


class DeploymentConfig(Frozen):
    model: str = Field(min_length=1)
    provider: str
    upstream_model: str | None = None
    # Unique endpoint id; defaults to "<provider>/<model>".
    id: str | None = None
    price: Price = Price()
    context_window: int = Field(8192, gt=0)
    capabilities: Capabilities = Capabilities()
    routing: DeploymentRouting = DeploymentRouting()
    # Client APIs this deployment's upstream takes as is: a request in one of them is passed through
    # (the client's body out, the upstream's answer or events back) instead of translated to chat.
    # Only provider kinds whose adapter speaks the API may list it (checked when the catalog is built).
    native: frozenset[NativeApi] = frozenset()
    # The weights the provider says it serves ("Q4_1", "bf16", "fp8"...), compared case-insensitively.
    # Where an endpoint and its model's reference name the same weights (for a GGUF: the same file,
    # its tokenizer and chat template with it), the distribution probe's test against the reference
    # is evidence on the endpoint's own grounds (probes.distribution), and a template check that
    # finds other prompt_tokens makes the endpoint suspect (probes.template_check).
    weights: str | None = Field(None, min_length=1, max_length=64)

    _names_header_safe = field_validator("model", "id", "weights")(header_safe)

    @property
    def endpoint_id(self) -> str:
        return self.id or f"{self.provider}/{self.model}"

    @property
    def target_model(self) -> str:
        return self.upstream_model or self.model
