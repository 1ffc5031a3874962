"""The gateway's configuration: one validated, frozen object.

Sources, highest first: keyword arguments, ``GW_*`` environment variables (nested with ``__``,
e.g. ``GW_SERVER__PORT=9000``), then a YAML file. This module is the only place that reads
the environment. A bad config raises `ConfigError` with one line naming the field and why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from gateway.limits.settings import LimitsConfig
from gateway.persistence.config import DatabaseConfig, PersistenceConfig, RetentionConfig
from gateway.pipeline.settings import AuthConfig
from gateway.routing.settings import BreakerConfig, RetryConfig, RoutingConfig
from gateway.state_store.config import StateStoreConfig
from gateway.tracing.settings import TracingConfig
from kernel.deployment import DeploymentConfig
from kernel.errors import ConfigError
from kernel.frozen import Frozen
from probes.settings import ProbeSettings
from providers.engines.config import EngineConfig
from providers.settings import ProviderConfig, UpstreamConfig


class ServerConfig(Frozen):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    # Request bodies nested deeper than this are a 400 naming the field (JSON writers stop at 255).
    max_json_depth: int = Field(64, ge=4, le=200)
    # /v1/completions: prompts in one `prompt` array (each is generated, best_of times); more is a 400.
    max_completion_prompts: int = Field(128, ge=1, le=2048)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Fail start-up when no gateway key is configured, instead of serving without auth.
    require_auth: bool = False
    # Trust X-Forwarded-For/-Proto from these proxy addresses (e.g. ["127.0.0.1"] behind a local
    # nginx). Empty: the headers are ignored and the middleware that reads them is not installed.
    forwarded_allow_ips: tuple[str, ...] = ()
    # The whole shutdown (draining in-flight requests and streams first, then the background work,
    # then local engines) fits in this budget: under Kubernetes' default 30 s grace period.
    shutdown_timeout_s: float = Field(25.0, gt=0, allow_inf_nan=False)
    # After SIGTERM and before that shutdown: keep accepting for this long while /readyz answers
    # 503 and every response closes its connection, so a balancer (Kubernetes endpoints, nginx's
    # pooled connections) moves away without a request being cut. Not part of shutdown_timeout_s.
    drain_delay_s: float = Field(0.0, ge=0, le=300, allow_inf_nan=False)

    # The address clients use (e.g. https://gw.example.com behind a TLS proxy): an https URL makes
    # the dashboard's session cookie Secure even when the socket itself is plain http.
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v


class TimeoutConfig(Frozen):
    """Seconds. `first_byte` covers headers and the first body bytes; `between_chunks` each later read."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(60.0, gt=0)
    between_chunks: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class MetricsConfig(Frozen):
    """Prometheus metrics at ``/metrics`` (a registry per app; bounded labels only)."""

    enabled: bool = True
    # Ask for the admin key (Bearer) on /metrics.
    require_auth: bool = False


class ResponsesConfig(Frozen):
    """The Responses API's stored responses (`store: true`, `previous_response_id`): kept in the
    state store (`state_store.backend`: redis shares them across replicas) for `ttl_s`, and with
    `durable` in the database too (`gateway.persistence.responses`)."""

    ttl_s: float = Field(7 * 86400, gt=0)
    # The most one stored response may take (JSON: response, input items, conversation so far);
    # over it the answer is sent with `store: false` and not stored, which also ends a chain.
    max_stored_bytes: int = Field(8 * 1024 * 1024, gt=0)
    # With persistence on: also keep them in the database, written behind, read when the state
    # store misses or is away (they outlive a Redis restart or eviction).
    durable: bool = False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GW_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    server: ServerConfig = ServerConfig()
    auth: AuthConfig = AuthConfig()
    timeouts: TimeoutConfig = TimeoutConfig()
    retry: RetryConfig = RetryConfig()
    breaker: BreakerConfig = BreakerConfig()
    providers: tuple[ProviderConfig, ...] = ()
    deployments: tuple[DeploymentConfig, ...] = ()
    engines: tuple[EngineConfig, ...] = ()
    routing: RoutingConfig = RoutingConfig()
    state_store: StateStoreConfig = StateStoreConfig()
    limits: LimitsConfig = LimitsConfig()
    database: DatabaseConfig = DatabaseConfig()
    persistence: PersistenceConfig = PersistenceConfig()
    retention: RetentionConfig = RetentionConfig()
    metrics: MetricsConfig = MetricsConfig()
    tracing: TracingConfig = TracingConfig()
    responses: ResponsesConfig = ResponsesConfig()
    probes: ProbeSettings = ProbeSettings()
    upstream: UpstreamConfig = UpstreamConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # YAML arrives through init kwargs (see `load_config`), so env overrides it field by field.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _cross_check(self) -> Settings:
        names = [p.name for p in self.providers]
        dup = _first_duplicate(names)
        if dup:
            raise ValueError(f"providers: duplicate provider name {dup!r}")
        known = set(names)
        for i, d in enumerate(self.deployments):
            if d.provider not in known:
                raise ValueError(
                    f"deployments.{i}.provider: unknown provider {d.provider!r}"
                    f" (known: {', '.join(sorted(known)) or 'none'})"
                )
        dup = _first_duplicate([d.endpoint_id for d in self.deployments])
        if dup:
            raise ValueError(f"deployments: duplicate endpoint id {dup!r}; set a distinct `id`")
        dup = _first_duplicate([k.name for k in self.auth.keys])
        if dup:
            raise ValueError(f"auth.keys: duplicate key name {dup!r}")
        for k in self.auth.keys:
            if k.team is not None and k.team not in self.limits.teams:
                raise ValueError(f"auth.keys: key {k.name!r} names team {k.team!r}, which limits.teams does not define")
        dup = _first_duplicate([e.name for e in self.engines] + names)
        if dup:
            raise ValueError(f"engines: name {dup!r} is already used by another engine or provider")
        if self.responses.durable and not self.persistence.enabled:
            raise ValueError("responses.durable keeps stored responses in the database: it needs persistence.enabled")
        return self

    def provider(self, name: str) -> ProviderConfig:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)


def _first_duplicate(items: list[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Read the YAML file (if any), overlay ``GW_*`` env vars, validate, resolve provider keys.

    `environ` defaults to the process environment; tests pass their own.
    """
    env = dict(os.environ if environ is None else environ)
    path = path or env.get("GW_CONFIG")
    data: dict[str, Any] = {}
    if path:
        data = _read_yaml(Path(path))
    data.update(overrides)
    try:
        settings = _bound_to(env)(**data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    except SettingsError as exc:  # e.g. a GW_* value that should be JSON and is not
        raise ConfigError(f"config error: {str(exc).splitlines()[0]}") from None
    return _resolve_secrets(settings, env)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' env source over a given mapping instead of `os.environ`."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._environ.items()}


def _bound_to(environ: Mapping[str, str]) -> type[Settings]:
    class _Settings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (_MappingEnvSource(settings_cls, environ), init_settings)

    _Settings.__name__ = "Settings"
    return _Settings


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    # The env var names a path to this file; it is not a setting.
    data.pop("config", None)
    return data


def _resolve_secrets(settings: Settings, env: Mapping[str, str]) -> Settings:
    providers = []
    for i, p in enumerate(settings.providers):
        if p.api_key_env and p.api_key is None:
            value = env.get(p.api_key_env)
            if not value:
                raise ConfigError(
                    f"config error: providers.{i}.api_key_env: environment variable {p.api_key_env} is not set"
                )
            p = p.model_copy(update={"api_key": SecretStr(value)})
        providers.append(p)
    try:
        proxy = settings.upstream.proxy.with_env(env)
    except ValueError as exc:
        raise ConfigError(f"config error: upstream.proxy: {exc}") from None
    upstream = settings.upstream.model_copy(update={"proxy": proxy})
    return settings.model_copy(update={"providers": tuple(providers), "upstream": upstream})


def _one_line(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    loc = ".".join(str(part) for part in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"config error: {loc + ': ' if loc else ''}{msg}{more}"


class ClientSettings(BaseSettings):
    """What `gwctl`'s client commands need to reach a running gateway (``GW_URL``, ``GW_ADMIN_KEY``,
    or ``GW_ADMIN_KEY_FILE``: a file holding the key, so it is on no command line)."""

    model_config = SettingsConfigDict(env_prefix="GW_", frozen=True, extra="ignore")

    url: str = "http://127.0.0.1:8080"
    admin_key: SecretStr | None = None
    admin_key_file: str | None = None
    timeout: float = 30.0
