"""Local engines as routing endpoints: one endpoint per supervised replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from gateway.catalog import Endpoint
from kernel.deployment import Capabilities, DeploymentConfig, DeploymentRouting
from providers.base import Adapter, Target
from providers.engines.config import EngineConfig
from providers.engines.models import chat_template, engine_weights
from providers.llamacpp import LlamaCppAdapter
from providers.registry import adapter_for

# Engine kind -> provider adapter kind.
ADAPTER_KIND: Mapping[str, str] = {"llamacpp": "llamacpp", "vllm": "vllm", "sglang": "sglang", "external": "openai"}
# Engine kinds whose server ignores `n` (one choice whatever is asked): dispatch fans out instead.
IGNORES_N = frozenset({"llamacpp"})


def engine_capabilities(cfg: EngineConfig) -> Capabilities:
    caps = cfg.capabilities
    if cfg.kind in IGNORES_N:
        caps = caps.model_copy(update={"native_n": False})
    if cfg.kind == "llamacpp" and cfg.embeddings:
        # llama-server --embeddings serves nothing else.
        caps = caps.model_copy(update={"modes": frozenset({"embeddings"}), "tools": False, "logprobs": False})
    return caps


def engine_routing(cfg: EngineConfig) -> DeploymentRouting:
    """The replicas' routing hints: llama.cpp has `parallel` slots, whose KV cache is its prefix cache."""
    routing = cfg.routing
    if routing.slots is None:
        routing = routing.model_copy(update={"slots": cfg.parallel if cfg.kind == "llamacpp" else 1})
    if cfg.kind == "llamacpp" and routing.cache.capacity_tokens is None:
        cache = routing.cache.model_copy(update={"capacity_tokens": cfg.n_ctx * cfg.parallel})
        routing = routing.model_copy(update={"cache": cache})
    return routing


def engine_adapter(cfg: EngineConfig) -> Adapter:
    template = chat_template(cfg)
    if template is not None and template.call_prefix is not None:
        # The bundled template: forced tool calls begin with its call opener (see providers.llamacpp).
        return LlamaCppAdapter(forced_call_prefix=template.call_prefix)
    return adapter_for(ADAPTER_KIND[cfg.kind])


def engine_endpoints(cfg: EngineConfig, supervisor: Any) -> list[Endpoint]:
    adapter = engine_adapter(cfg)
    endpoints = []
    for replica in supervisor.replicas:
        endpoint_id = f"{cfg.name}-{replica.index}"
        deployment = DeploymentConfig(
            model=cfg.served_model_name,
            provider=cfg.name,
            upstream_model=cfg.served_model_name,
            id=endpoint_id,
            price=cfg.price,
            context_window=cfg.n_ctx,
            capabilities=engine_capabilities(cfg),
            routing=engine_routing(cfg),
            native=cfg.native,
            weights=engine_weights(cfg),
        )
        index = replica.index
        endpoints.append(
            Endpoint(
                id=endpoint_id,
                model=cfg.served_model_name,
                provider=cfg.name,
                kind=cfg.kind,
                region="local",
                keeps_prompts=False,
                deployment=deployment,
                target=Target(
                    endpoint_id=endpoint_id,
                    base_url=replica.base_url,
                    upstream_model=cfg.served_model_name,
                    public_model=cfg.served_model_name,
                ),
                adapter=adapter,
                ready=partial(supervisor.is_ready, index),
                load=partial(supervisor.load, index) if hasattr(supervisor, "load") else None,
            )
        )
    return endpoints


def all_engine_endpoints(configs: Sequence[EngineConfig], supervisors: Sequence[Any]) -> list[Endpoint]:
    return [ep for cfg, s in zip(configs, supervisors, strict=True) for ep in engine_endpoints(cfg, s)]
