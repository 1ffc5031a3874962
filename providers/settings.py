"""The upstream transport's settings: frozen values that `gateway.config.Settings` embeds as
``upstream`` (and each provider's ``proxy``/``tls`` overrides).

Imports nothing from the gateway, so `gateway.config` can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from kernel.frozen import Frozen

MiB = 1024 * 1024


class UpstreamLimits(Frozen):
    # Decoded bytes of one upstream answer (after gzip/deflate/br): past it the answer is refused
    # with `upstream_response_too_large`, so a compression bomb stops here, not at the memory limit.
    max_response_bytes: int = Field(64 * MiB, gt=0)
    # One header line, and the number of header lines; past either the answer is refused.
    max_header_bytes: int = Field(16 * 1024, ge=1024)
    max_headers: int = Field(128, ge=16)
    # Open connections over all upstreams (0: no limit); idle ones close after `keepalive_seconds`.
    max_connections: int = Field(0, ge=0)
    keepalive_seconds: float = Field(30.0, gt=0)


class TLSConfig(Frozen):
    """Certificates are always verified against the system's CAs; `ca_file` adds more (a private
    CA, a TLS-inspecting proxy's). `cert_file`/`key_file`: a client certificate for mutual TLS."""

    verify: bool = True
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def _proxy_url(v: SecretStr | None) -> SecretStr | None:
    if v is None:
        return v
    raw = v.get_secret_value()
    if raw != "direct" and not raw.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// proxy URL, or 'direct'")
    return v


class ProxyConfig(Frozen):
    """Where upstream requests go through. Unset fields are filled from ``HTTP_PROXY``,
    ``HTTPS_PROXY`` and ``NO_PROXY`` (or their lower-case forms) when `from_env` is on.
    Loopback upstreams (a local engine) are always reached directly."""

    from_env: bool = True
    # Secret: a proxy URL may carry credentials (http://user:pass@proxy:3128).
    http: SecretStr | None = Field(None, repr=False)
    https: SecretStr | None = Field(None, repr=False)
    no_proxy: str | None = None

    @field_validator("http", "https")
    @classmethod
    def _url(cls, v: SecretStr | None) -> SecretStr | None:
        return _proxy_url(v)

    def with_env(self, env: Mapping[str, str]) -> ProxyConfig:
        if not self.from_env:
            return self

        def read(name: str) -> str | None:
            return env.get(name) or env.get(name.lower()) or None

        update: dict[str, object] = {}
        for field, name in (("http", "HTTP_PROXY"), ("https", "HTTPS_PROXY")):
            if getattr(self, field) is None and (value := read(name)):
                try:
                    update[field] = _proxy_url(SecretStr(value))
                except ValueError as exc:
                    raise ValueError(f"{name} (environment): {exc}") from None
        if self.no_proxy is None and (value := read("NO_PROXY")):
            update["no_proxy"] = value
        return self.model_copy(update=update) if update else self


class UpstreamConfig(Frozen):
    # The HTTP client implementation: a name `providers.clients.CLIENTS` registers (a test keeps
    # the two in step; see the README for why aiohttp).
    client: Literal["aiohttp"] = "aiohttp"
    limits: UpstreamLimits = UpstreamLimits()
    tls: TLSConfig = TLSConfig()
    proxy: ProxyConfig = ProxyConfig()


def checked_proxy(v: SecretStr | None) -> SecretStr | None:
    """A provider's own `proxy`: a URL, 'direct' (never a proxy), or unset (the `upstream.proxy` one)."""
    return _proxy_url(v)


class ProviderConfig(Frozen):
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
