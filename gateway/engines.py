"""Local engines as routing endpoints: one endpoint per supervised replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.catalog import Endpoint
from gateway.config import Capabilities, DeploymentConfig, EngineConfig
from providers.base import Target
from providers.registry import adapter_for

# Engine kind -> provider adapter kind.
ADAPTER_KIND: Mapping[str, str] = {"llamacpp": "llamacpp", "vllm": "vllm", "sglang": "sglang", "external": "openai"}
# Engine kinds whose server ignores `n` (one choice whatever is asked): dispatch fans out instead.
IGNORES_N = frozenset({"llamacpp"})


def engine_capabilities(cfg: EngineConfig) -> Capabilities:
    if cfg.kind in IGNORES_N:
        return cfg.capabilities.model_copy(update={"native_n": False})
    return cfg.capabilities


def engine_endpoints(cfg: EngineConfig, supervisor: Any) -> list[Endpoint]:
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
            routing=cfg.routing,
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
                adapter=adapter_for(ADAPTER_KIND[cfg.kind]),
                ready=lambda s=supervisor, i=index: s.is_ready(i),
            )
        )
    return endpoints


def all_engine_endpoints(configs: Sequence[EngineConfig], supervisors: Sequence[Any]) -> list[Endpoint]:
    return [ep for cfg, s in zip(configs, supervisors, strict=True) for ep in engine_endpoints(cfg, s)]
