"""Client name -> HTTP client class: the registry behind `upstream.client`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from providers.http import AiohttpClient, HTTPClient
from providers.routes import ProviderTransport, Routes
from providers.settings import UpstreamConfig

CLIENTS: Mapping[str, Callable[[UpstreamConfig, Routes], HTTPClient]] = {"aiohttp": AiohttpClient}


def client_factory(upstream: UpstreamConfig, providers: Iterable[ProviderTransport] = ()) -> Callable[[], HTTPClient]:
    """Resolves proxies and loads TLS files now (a bad file fails start-up with a ConfigError); the
    returned factory makes the client inside the running loop, which it binds to."""
    routes = Routes(upstream, providers)
    make = CLIENTS[upstream.client]
    return lambda: make(upstream, routes)
