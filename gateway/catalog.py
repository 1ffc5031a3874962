"""The endpoints the gateway can route to, indexed by public model name.

Built once at start-up from the configured deployments and the local engines' replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kernel.deployment import DeploymentConfig
from kernel.errors import ConfigError, ModelNotFound
from providers.base import Adapter, NativeAdapter, Target
from providers.registry import adapter_for
from providers.settings import ProviderConfig


class ReportedLoad(Protocol):
    """A supervised engine's own account of its load (`providers.engines.load.EngineLoad`)."""

    @property
    def processing(self) -> int: ...  # requests being decoded

    @property
    def deferred(self) -> int: ...  # requests waiting for a slot

    @property
    def kv_usage(self) -> float: ...  # 0..1 of its KV cells held by running requests


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    model: str
    provider: str
    kind: str
    region: str
    keeps_prompts: bool
    deployment: DeploymentConfig
    target: Target
    adapter: Adapter
    # For supervised engines: a cheap, I/O-free readiness check (False while restarting).
    ready: Callable[[], bool] | None = None
    # For engines that report it: their last fresh load report, or None (I/O-free, like `ready`).
    load: Callable[[], ReportedLoad | None] | None = None

    def is_ready(self) -> bool:
        return self.ready is None or self.ready()

    def reported_load(self) -> ReportedLoad | None:
        return None if self.load is None else self.load()


class Catalog:
    def __init__(self, endpoints: Iterable[Endpoint], *, created: int) -> None:
        self.endpoints: tuple[Endpoint, ...] = tuple(endpoints)
        self.created = created
        by_model: dict[str, list[Endpoint]] = {}
        for ep in self.endpoints:
            by_model.setdefault(ep.model, []).append(ep)
        self._by_model = {model: tuple(eps) for model, eps in by_model.items()}
        self.by_id = {ep.id: ep for ep in self.endpoints}

    def models(self) -> list[str]:
        return sorted(self._by_model)

    def has_model(self, model: str) -> bool:
        return model in self._by_model

    def candidates(self, model: str) -> tuple[Endpoint, ...]:
        try:
            return self._by_model[model]
        except KeyError:
            raise ModelNotFound(
                f"The model `{model}` does not exist or you do not have access to it.", param="model"
            ) from None


class CatalogSettings(Protocol):
    """The slices of `gateway.config.Settings` the catalog is built from."""

    @property
    def providers(self) -> Sequence[ProviderConfig]: ...

    @property
    def deployments(self) -> Sequence[DeploymentConfig]: ...


def _checked_native(dep: DeploymentConfig, kind: str, adapter: Adapter) -> None:
    """`native` lists only client APIs the provider kind's adapter passes through."""
    takes = adapter.native_apis if isinstance(adapter, NativeAdapter) else frozenset()
    if missing := sorted(dep.native - takes):
        raise ConfigError(
            f"config error: deployment {dep.endpoint_id!r}: native: provider kind {kind!r} does not take "
            f"the {missing[0]} API as is (anthropic and llamacpp take messages; the OpenAI-compatible kinds other than llamacpp take responses)"
        )


def endpoints_from_settings(settings: CatalogSettings) -> list[Endpoint]:
    providers = {p.name: p for p in settings.providers}
    endpoints = []
    for dep in settings.deployments:
        provider = providers[dep.provider]
        adapter = adapter_for(provider.kind)
        _checked_native(dep, provider.kind, adapter)
        target = Target(
            endpoint_id=dep.endpoint_id,
            base_url=provider.base_url,
            upstream_model=dep.target_model,
            public_model=dep.model,
            api_key=provider.api_key.get_secret_value() if provider.api_key else None,
            extra_headers=provider.headers,
        )
        endpoints.append(
            Endpoint(
                id=dep.endpoint_id,
                model=dep.model,
                provider=provider.name,
                kind=provider.kind,
                region=provider.region,
                keeps_prompts=provider.keeps_prompts,
                deployment=dep,
                target=target,
                adapter=adapter,
            )
        )
    return endpoints
