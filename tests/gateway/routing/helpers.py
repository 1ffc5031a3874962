"""Endpoints, features and snapshots for the routing tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.catalog import Endpoint
from gateway.routing.features import RequestFeatures, blocks_of, extract
from gateway.routing.preferences import parse
from gateway.routing.settings import KeyPolicy, RoutingConfig
from kernel.deployment import Capabilities, DeploymentRouting, Price
from tests.fakes.catalog import make_endpoint

CFG = RoutingConfig()


def endpoint(
    id: str,
    model: str = "m",
    *,
    provider: str | None = None,
    kind: str = "openai",
    region: str = "us",
    keeps_prompts: bool = False,
    context_window: int = 8192,
    price: dict[str, float] | None = None,
    capabilities: dict[str, Any] | None = None,
    routing: dict[str, Any] | None = None,
    ready: Any = None,
) -> Endpoint:
    ep = make_endpoint(id, model, provider=provider, ready=ready)
    deployment = ep.deployment.model_copy(
        update={
            "context_window": context_window,
            "price": Price(**(price or {})),
            "capabilities": Capabilities(**(capabilities or {})),
            "routing": DeploymentRouting(**(routing or {})),
        }
    )
    return replace(ep, kind=kind, region=region, keeps_prompts=keeps_prompts, deployment=deployment)


def local(id: str, model: str = "m", slots: int = 1, **routing: Any) -> Endpoint:
    return endpoint(id, model, provider="local", kind="vllm", region="local", routing={"slots": slots, **routing})


def chat(content: str = "hello", *, model: str = "m", system: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return {"model": model, "messages": messages, **extra}


def features(
    body: dict[str, Any] | None = None,
    *,
    op: str = "chat",
    key_policy: KeyPolicy | None = None,
    cfg: RoutingConfig = CFG,
    exact: int | None = None,
) -> RequestFeatures:
    body = body if body is not None else chat()
    f = extract(
        op,
        body,
        blocks=blocks_of(cfg.affinity),
        family_bytes=cfg.affinity.family_bytes,
        expected_output_tokens=cfg.expected_output_tokens,
        prefs=parse(body.get("provider")),
        key_policy=key_policy or KeyPolicy(),
        key_name="team",
    )
    f.exact_prompt_tokens = exact
    return f
