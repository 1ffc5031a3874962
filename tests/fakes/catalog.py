"""Build `Endpoint`s and `Catalog`s for unit tests without a full config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.catalog import Catalog, Endpoint
from kernel.deployment import Capabilities, DeploymentConfig, Price
from providers.base import Adapter, Target
from providers.openai_compat import OpenAICompatAdapter


def make_endpoint(
    id: str,
    model: str = "m",
    *,
    provider: str | None = None,
    upstream_model: str | None = None,
    base_url: str = "http://upstream.test/v1",
    capabilities: dict[str, Any] | None = None,
    price: dict[str, float] | None = None,
    adapter: Adapter | None = None,
    ready: Callable[[], bool] | None = None,
    api_key: str | None = None,
    weights: str | None = None,
) -> Endpoint:
    provider = provider or id.split("/")[0]
    deployment = DeploymentConfig(
        model=model,
        provider=provider,
        id=id,
        upstream_model=upstream_model,
        capabilities=Capabilities(**(capabilities or {})),
        price=Price(**(price or {})),
        weights=weights,
    )
    target = Target(
        endpoint_id=id, base_url=base_url, upstream_model=deployment.target_model, public_model=model, api_key=api_key
    )
    return Endpoint(
        id=id,
        model=model,
        provider=provider,
        kind="openai",
        region="test",
        keeps_prompts=False,
        deployment=deployment,
        target=target,
        adapter=adapter or OpenAICompatAdapter(),
        ready=ready,
    )


def make_catalog(*endpoints: Endpoint) -> Catalog:
    return Catalog(endpoints, created=1_700_000_000)
