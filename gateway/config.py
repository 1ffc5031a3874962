"""The gateway's configuration: one validated, frozen object.

Sources, highest first: keyword arguments, ``GW_*`` environment variables (nested with ``__``,
e.g. ``GW_SERVER__PORT=9000``), then a YAML file. This module is the only place that reads
the environment. A bad config raises `ConfigError` with one line naming the field and why.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from gateway.errors import ConfigError
from gateway.limits.settings import KeyLimits, LimitsConfig
from gateway.routing.settings import DeploymentRouting, RoutingConfig, StateStoreConfig
from probes.settings import ProbeSettings
from providers.settings import TLSConfig, UpstreamConfig, checked_proxy

Mode = Literal["chat", "completions", "embeddings"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    # Request bodies nested deeper than this are a 400 naming the field (JSON writers stop at 255).
    max_json_depth: int = Field(64, ge=4, le=200)
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


class TimeoutConfig(_Frozen):
    """Seconds. `first_byte` covers headers and the first body bytes; `between_chunks` each later read."""

    connect: float = Field(5.0, gt=0)
    first_byte: float = Field(60.0, gt=0)
    between_chunks: float = Field(60.0, gt=0)
    total: float = Field(600.0, gt=0)


class RetryConfig(_Frozen):
    attempts_per_endpoint: int = Field(2, ge=1, le=10)
    max_attempts: int = Field(6, ge=1, le=50)
    backoff_base: float = Field(0.1, ge=0)
    backoff_max: float = Field(2.0, ge=0)
    # An upstream asking us to wait longer than this is skipped for the next candidate instead.
    max_retry_after: float = Field(5.0, ge=0)
    # The longest an upstream's Retry-After may block its endpoint (here and on every replica);
    # longer values are clamped, non-finite ones ignored.
    max_retry_after_block: float = Field(300.0, gt=0, allow_inf_nan=False)


class BreakerConfig(_Frozen):
    window_seconds: float = Field(60.0, gt=0)
    min_requests: int = Field(5, ge=1)
    failure_rate: float = Field(0.5, gt=0, le=1)
    open_seconds: float = Field(30.0, gt=0)
    half_open_probes: int = Field(1, ge=1)


class Price(_Frozen):
    """USD per 1M tokens."""

    input: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(0.0, ge=0)

    @property
    def cached(self) -> float:
        return self.input if self.cached_input is None else self.cached_input


class Capabilities(_Frozen):
    modes: frozenset[Mode] = frozenset({"chat", "completions"})
    tools: bool = True
    logprobs: bool = True
    max_top_logprobs: int = Field(20, ge=0, le=20)
    # Whether the upstream honours `n` > 1 itself. When False (llama.cpp's server ignores `n`),
    # dispatch fans the request out n times and merges the answers (gateway.pipeline.fanout).
    native_n: bool = True
    # Without native `n`, each choice is one more upstream request: a larger `n` is a 400.
    max_fanout_n: int = Field(8, ge=1, le=128)


class ProviderConfig(_Frozen):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    # Adapter kind, looked up in `providers.registry`.
    kind: str = "openai"
    base_url: str
    # The name of the environment variable that holds the API key (never the key itself).
    api_key_env: str | None = None
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    region: str = "unknown"
    # Data policy: whether the provider may keep or train on prompts.
    keeps_prompts: bool = False
    headers: dict[str, str] = Field(default_factory=dict)
    # This provider's proxy URL, or "direct"; unset: `upstream.proxy` (see providers/settings.py).
    proxy: SecretStr | None = Field(None, repr=False)
    # Replaces `upstream.tls` for this provider (its own CA or client certificate).
    tls: TLSConfig | None = None

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, v: SecretStr | None) -> SecretStr | None:
        return checked_proxy(v)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")


def _header_safe(v: str | None) -> str | None:
    """Model names and endpoint ids are sent back in reply headers (x-gateway-endpoint, x-gateway-route)."""
    if v is not None and not (v.isascii() and v.isprintable()):
        raise ValueError("must be printable ASCII (it is sent in reply headers)")
    return v


class DeploymentConfig(_Frozen):
    model: str = Field(min_length=1)
    provider: str
    upstream_model: str | None = None
    # Unique endpoint id; defaults to "<provider>/<model>".
    id: str | None = None
    price: Price = Price()
    context_window: int = Field(8192, gt=0)
    capabilities: Capabilities = Capabilities()
    routing: DeploymentRouting = DeploymentRouting()

    _names_header_safe = field_validator("model", "id")(_header_safe)

    @property
    def endpoint_id(self) -> str:
        return self.id or f"{self.provider}/{self.model}"

    @property
    def target_model(self) -> str:
        return self.upstream_model or self.model


class GatewayKey(KeyLimits):
    """A config key, with the same limits a database key can have (`gateway.limits.settings`)."""

    name: str = Field(min_length=1)
    # A team of `limits.teams`: its limits and budget bind this key too.
    team: str | None = None
    # The key itself, or its stored hash as "sha256:<hex>".
    key: SecretStr

    @field_validator("key")
    @classmethod
    def _hash_form(cls, v: SecretStr) -> SecretStr:
        raw = v.get_secret_value()
        if raw.startswith("sha256:"):
            digest = raw[len("sha256:") :]
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError("a sha256: key must be followed by 64 hex digits")
        elif len(raw) < 8:
            raise ValueError("must be at least 8 characters")
        return v

    @property
    def digest(self) -> str:
        return key_digest(self.key.get_secret_value())


class AuthConfig(_Frozen):
    keys: tuple[GatewayKey, ...] = ()
    admin_key: SecretStr | None = None
    # Accept callers without a key. True is refused on a non-loopback bind; unset means open only
    # when no key can exist (no auth.keys and persistence off), never because a read failed.
    open: bool | None = None
    # Past this long without a successful key refresh, database keys are refused (503
    # key_store_unavailable) so a revocation cannot stay unseen; config keys keep working.
    max_key_staleness_s: float = Field(60.0, gt=0)
    # Dashboard sessions end after this long without a request (and after 12 h in any case).
    session_idle_timeout_s: float = Field(1800.0, gt=0)
    # Failed admin sign-ins and admin bearer checks allowed per client address per minute.
    admin_failures_per_minute: int = Field(10, ge=1)

    @field_validator("admin_key")
    @classmethod
    def _long_admin_key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return v


class EngineConfig(_Frozen):
    """A local engine that the gateway starts and supervises (see `providers.engines`)."""

    name: str = Field("local", pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: Literal["llamacpp", "vllm", "sglang", "external"] = "llamacpp"
    # A shipped model alias ("smollm2", "gemma3-270m"), a GGUF path, or a model id for vLLM/SGLang.
    model: str = "smollm2"
    # The public model name clients ask for.
    served_model_name: str = "smollm2-135m-instruct"
    replicas: int = Field(1, ge=1, le=16)
    host: str = "127.0.0.1"
    # Replica i listens on base_port + i; 0 picks free ports.
    base_port: int = Field(0, ge=0, le=65535)
    # For kind=external: the running engine's OpenAI base URL.
    url: str | None = None
    n_ctx: int = Field(4096, gt=0)
    n_threads: int | None = Field(None, ge=1)
    # llama.cpp: sequences one replica decodes at once (llama-server -np, continuous batching),
    # each with its own n_ctx of KV cache; routing counts them as the replica's slots.
    parallel: int = Field(4, ge=1, le=64)
    # llama.cpp: serve /v1/embeddings only (llama-server --embeddings), pooling the model's
    # hidden states this way ("mean" makes any chat model an embedding model, if not a good one).
    embeddings: bool = False
    pooling: Literal["mean", "cls", "last"] = "mean"
    # llama.cpp: a Jinja chat template to use instead of the GGUF's own (default: the GGUF's; for the
    # shipped smollm2, its template extended with tool calls, see providers/engines/templates/).
    chat_template_file: str | None = None
    prefix_cache: bool = True
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    extra_args: tuple[str, ...] = ()
    ready_timeout: float = Field(180.0, gt=0)
    restart_backoff_initial: float = Field(0.5, gt=0)
    restart_backoff_max: float = Field(30.0, gt=0)
    price: Price = Price()
    capabilities: Capabilities = Capabilities()
    # Routing hints for every replica (default: `parallel` slots each for llama.cpp, else one;
    # the engine's cache profile).
    routing: DeploymentRouting = DeploymentRouting()

    _name_header_safe = field_validator("served_model_name")(_header_safe)

    @model_validator(mode="after")
    def _external_needs_url(self) -> EngineConfig:
        if self.kind == "external" and not self.url:
            raise ValueError("kind 'external' needs url")
        return self


class DatabaseConfig(_Frozen):
    """Where persistence lives: SQLite (a file, WAL mode) by default, PostgreSQL in production
    (``postgresql+psycopg://user@host:5432/db``; a plain ``postgresql://`` URL means psycopg 3)."""

    url: str = "sqlite:///./gateway.db"
    connect_timeout: float = Field(5.0, gt=0)
    pool_size: int = Field(5, ge=1, le=100)
    # PostgreSQL's statement_timeout for the gateway's sessions, and (with connect_timeout) how long
    # an unacknowledged send may wait on a half-open connection (tcp_user_timeout).
    statement_timeout: float = Field(30.0, gt=0)

    @field_validator("url")
    @classmethod
    def _dialect(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "sqlite+pysqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("must be a sqlite:/// or postgresql:// URL")
        return v


class PersistenceConfig(_Frozen):
    """Request records go to a bounded queue that a background writer drains in batches; past the
    bound they spill to an append-only file, replayed when the database answers again."""

    enabled: bool = False
    # Where the database writes run: a worker process (the gateway's own process then does no
    # database work and its event loop never shares the GIL with it), or a thread.
    writer: Literal["process", "thread"] = "process"
    queue_size: int = Field(10_000, ge=1)
    batch_size: int = Field(500, ge=1, le=10_000)
    flush_interval: float = Field(0.5, gt=0)
    # One spill file per gateway process (replicas on one host need their own paths); a restarted
    # process replays what its predecessor left there.
    spill_path: str = "./gateway-spill.jsonl"
    spill_max_bytes: int = Field(256 * 1024 * 1024, ge=0)
    retry_initial: float = Field(0.5, gt=0)
    retry_max: float = Field(10.0, gt=0)
    # Keep prompt and response bodies in the request log (off: metadata only).
    store_bodies: bool = False
    # How often each replica re-reads gateway keys and manual endpoint states from the database.
    refresh_interval: float = Field(5.0, gt=0)
    # A refresh that has not answered by then counts as failed (the next round tries again).
    refresh_timeout: float = Field(10.0, gt=0)
    shutdown_timeout: float = Field(10.0, gt=0)
    # A batch write or a refresh that takes longer counts as the database being down (retried).
    write_timeout: float = Field(30.0, gt=0)


class RetentionConfig(_Frozen):
    """Days to keep each table's rows (None: forever), enforced by a periodic job in small batches."""

    interval: float = Field(3600.0, gt=0)
    batch_size: int = Field(2000, ge=1)
    pause: float = Field(0.05, ge=0)
    request_log_days: float | None = Field(30.0, gt=0)
    spend_days: float | None = Field(400.0, gt=0)
    probe_days: float | None = Field(90.0, gt=0)
    health_days: float | None = Field(365.0, gt=0)
    manual_action_days: float | None = Field(365.0, gt=0)
    config_history_days: float | None = Field(365.0, gt=0)


class MetricsConfig(_Frozen):
    """Prometheus metrics at ``/metrics`` (a registry per app; bounded labels only)."""

    enabled: bool = True
    # Ask for the admin key (Bearer) on /metrics.
    require_auth: bool = False


def key_digest(raw: str) -> str:
    """The stored form of a gateway key: its sha256 hex digest (a 'sha256:' value is already one)."""
    if raw.startswith("sha256:"):
        return raw[len("sha256:") :].lower()
    return hashlib.sha256(raw.encode()).hexdigest()


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
