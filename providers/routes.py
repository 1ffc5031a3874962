"""How an upstream URL is reached: its proxy and TLS context, resolved once per URL.

`Routes` is built once from `upstream` settings and the providers' own `proxy`/`tls`; a client asks
it per request (a dict lookup after the first).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed

from pydantic import SecretStr

from kernel.errors import ConfigError
from providers.settings import ProxyConfig, TLSConfig, UpstreamConfig


class ProviderTransport(Protocol):
    """What a provider's config says about reaching it (`providers.settings.ProviderConfig` fits)."""

    @property
    def base_url(self) -> str: ...

    @property
    def proxy(self) -> SecretStr | None: ...

    @property
    def tls(self) -> TLSConfig | None: ...


@dataclass(frozen=True, slots=True)
class Route:
    # The proxy URL (credentials included, for the client to take apart), or None: direct.
    proxy: str | None
    # For https upstreams: the context that verifies them; None for plain http.
    tls: ssl.SSLContext | None


def ssl_context(tls: TLSConfig) -> ssl.SSLContext:
    """The system's CAs plus `ca_file`; a client certificate when configured. Bad files fail start-up."""
    context = ssl.create_default_context()
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        if tls.ca_file:
            context.load_verify_locations(cafile=tls.ca_file)
        if tls.cert_file:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"config error: tls: cannot load {tls.ca_file or tls.cert_file}: {exc}") from None
    return context


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Routes:
    """Proxy and TLS per upstream base URL; the longest configured base URL that prefixes a request's
    URL wins, else the `upstream` defaults (env proxies minus NO_PROXY, never for loopback hosts)."""

    def __init__(self, upstream: UpstreamConfig = UpstreamConfig(), providers: Iterable[ProviderTransport] = ()) -> None:
        self._proxy = upstream.proxy
        self._contexts: dict[TLSConfig, ssl.SSLContext] = {}
        self._default_tls = self._context(upstream.tls)
        overrides = [(p.base_url, p.proxy, p.tls) for p in providers if p.proxy is not None or p.tls is not None]
        self._overrides = sorted(overrides, key=lambda o: len(o[0]), reverse=True)
        self._cache: dict[str, Route] = {}

    def _context(self, tls: TLSConfig) -> ssl.SSLContext:
        if tls not in self._contexts:
            self._contexts[tls] = ssl_context(tls)
        return self._contexts[tls]

    def for_url(self, url: str) -> Route:
        route = self._cache.get(url)
        if route is None:
            route = self._resolve(url)
            if len(self._cache) < 4096:
                self._cache[url] = route
        return route

    def _resolve(self, url: str) -> Route:
        parts = urlsplit(url)
        proxy: SecretStr | None = None
        tls = self._default_tls
        for base, own_proxy, own_tls in self._overrides:
            if url == base or url.startswith(base + "/"):
                proxy = own_proxy
                tls = self._context(own_tls) if own_tls is not None else tls
                break
        if proxy is not None:
            chosen = None if proxy.get_secret_value() == "direct" else proxy.get_secret_value()
        else:
            chosen = _from_defaults(self._proxy, parts.scheme, parts.hostname or "", parts.port)
        return Route(proxy=chosen, tls=tls if parts.scheme == "https" else None)


def _from_defaults(config: ProxyConfig, scheme: str, host: str, port: int | None) -> str | None:
    value = config.https if scheme == "https" else config.http
    if value is None or value.get_secret_value() == "direct" or is_loopback(host):
        return None
    if config.no_proxy:
        target = f"{host}:{port}" if port else host
        if proxy_bypass_environment(target, {"no": config.no_proxy}):
            return None
    return value.get_secret_value()

