"""Proxies through a real local proxy (CONNECT for https, absolute-form for http, Basic auth):
from HTTP(S)_PROXY/NO_PROXY via `load_config`, and per provider. The upstream's name resolves only
at the proxy (like a corporate network's), so an answer proves the request went through it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import trustme
from pydantic import SecretStr

from gateway.config import load_config
from kernel.errors import ProviderConnectError, ProviderError
from providers.settings import ProviderConfig, ProxyConfig, TLSConfig, UpstreamConfig
from tests.providers.http_contract.conftest import SLOW_OK, MakeClient, no_env, post
from tests.providers.http_contract.servers import ConnectProxy, RawServer, keep_serving
from tests.providers.http_contract.test_tls import server_context

KEY = "sk-provider-secret-0123456789"
CREDS = ("proxyuser", "proxy-pass")
NAME = "upstream.test"


def env_upstream(environ: dict[str, str], ca_file: Path | None = None) -> UpstreamConfig:
    """The `upstream` slice as `load_config` builds it from this environment."""
    upstream = load_config(environ=environ).upstream
    if ca_file is not None:
        upstream = upstream.model_copy(update={"tls": TLSConfig(ca_file=str(ca_file))})
    return upstream


def authorised() -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}"}


async def test_https_proxy_from_the_environment_tunnels_and_never_sees_the_key(
    make_client: MakeClient, ca: trustme.CA, ca_file: Path
) -> None:
    async with RawServer(keep_serving(), tls=server_context(ca)) as origin, ConnectProxy(
        auth=CREDS, hosts={NAME: "127.0.0.1"}
    ) as proxy:
        client = make_client(env_upstream({"HTTPS_PROXY": proxy.url(CREDS)}, ca_file))
        for _ in range(2):
            resp = await asyncio.wait_for(client.send(post(origin.url(host=NAME), headers=authorised()), SLOW_OK, "e"), 30)
            assert await resp.read() == b'{"ok": true}'
    assert origin.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert proxy.log.heads and all(h.startswith(f"CONNECT {NAME}:{origin.port} ".encode()) for h in proxy.log.heads)
    assert KEY.encode() not in bytes(proxy.log.seen)  # neither in the CONNECT head nor in the tunnel
    assert b"Bearer" not in bytes(proxy.log.seen)


async def test_proxy_credentials_are_required_and_a_refusal_is_a_connect_error(
    make_client: MakeClient, ca: trustme.CA, ca_file: Path
) -> None:
    async with RawServer(keep_serving(), tls=server_context(ca)) as origin, ConnectProxy(
        auth=CREDS, hosts={NAME: "127.0.0.1"}
    ) as proxy:
        client = make_client(env_upstream({"HTTPS_PROXY": proxy.url(("proxyuser", "wrong"))}, ca_file))
        with pytest.raises(ProviderConnectError):
            await asyncio.wait_for(client.send(post(origin.url(host=NAME), headers=authorised()), SLOW_OK, "e"), 30)
    assert proxy.log.refused >= 1 and origin.requests == []


async def test_http_proxy_from_lower_case_environment(make_client: MakeClient) -> None:
    async with RawServer(keep_serving()) as origin, ConnectProxy(auth=CREDS, hosts={NAME: "127.0.0.1"}) as proxy:
        client = make_client(env_upstream({"http_proxy": proxy.url(CREDS)}))
        resp = await asyncio.wait_for(client.send(post(origin.url(host=NAME)), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'
    assert proxy.log.heads[0].startswith(f"POST http://{NAME}:{origin.port}/v1/x ".encode())
    assert "proxy-authorization" not in origin.requests[0].headers


async def test_no_proxy_and_loopback_go_direct(make_client: MakeClient) -> None:
    async with RawServer(keep_serving()) as origin, ConnectProxy(auth=CREDS, hosts={NAME: "127.0.0.1"}) as proxy:
        env = {"HTTP_PROXY": proxy.url(CREDS)}
        via = make_client(env_upstream(env))
        resp = await asyncio.wait_for(via.send(post(origin.url(host=NAME)), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'
        assert len(proxy.log.heads) == 1
        # Listed in NO_PROXY: tried directly, where only the proxy could have resolved the name.
        direct = make_client(env_upstream({**env, "NO_PROXY": f"example.com,.{NAME.split('.')[-1]}"}))
        with pytest.raises(ProviderError):
            await asyncio.wait_for(direct.send(post(origin.url(host=NAME)), SLOW_OK, "e"), 30)
        # A loopback address never goes through the environment's proxy.
        resp = await asyncio.wait_for(via.send(post(origin.url(host="127.0.0.1")), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'
    assert len(proxy.log.heads) == 1
    assert len(origin.requests) == 2


async def test_a_provider_proxy_overrides_the_environment(make_client: MakeClient) -> None:
    async with RawServer(keep_serving()) as origin, ConnectProxy(hosts={NAME: "127.0.0.1"}) as env_proxy, ConnectProxy(
        auth=CREDS, hosts={NAME: "127.0.0.1"}
    ) as own_proxy:
        base = f"http://{NAME}:{origin.port}/v1"
        providers = [
            ProviderConfig(name="p", base_url=base, proxy=SecretStr(own_proxy.url(CREDS))),
            ProviderConfig(name="q", base_url=f"http://127.0.0.1:{origin.port}/v2", proxy=SecretStr(own_proxy.url(CREDS))),
        ]
        client = make_client(env_upstream({"HTTP_PROXY": env_proxy.url()}), providers)
        for url in (base + "/chat/completions", f"http://127.0.0.1:{origin.port}/v2/embeddings"):
            resp = await asyncio.wait_for(client.send(post(url), SLOW_OK, "e"), 30)
            assert await resp.read() == b'{"ok": true}'
    assert env_proxy.log.heads == []
    assert len(own_proxy.log.heads) == 2  # a provider's proxy applies even to a loopback address


async def test_a_provider_set_to_direct_ignores_the_environment(make_client: MakeClient) -> None:
    async with RawServer(keep_serving()) as origin, ConnectProxy(hosts={NAME: "127.0.0.1"}) as proxy:
        base = f"http://{NAME}:{origin.port}/v1"
        providers = [ProviderConfig(name="p", base_url=base, proxy=SecretStr("direct"))]
        client = make_client(env_upstream({"HTTP_PROXY": proxy.url()}), providers)
        with pytest.raises(ProviderError):  # direct, where the name does not resolve
            await asyncio.wait_for(client.send(post(base + "/x"), SLOW_OK, "e"), 30)
        resp = await asyncio.wait_for(client.send(post(origin.url("/v2/x", host=NAME)), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'  # outside its base URL: the environment's proxy
    assert len(proxy.log.heads) == 1


def test_proxy_settings_come_from_the_environment_only_when_asked() -> None:
    env = {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "internal"}
    on = load_config(environ=env).upstream.proxy
    assert on.https is not None and on.https.get_secret_value() == "http://p:3128" and on.no_proxy == "internal"
    off = load_config(environ=env, upstream={"proxy": {"from_env": False}}).upstream.proxy
    assert off.https is None and off.no_proxy is None
    assert "p:3128" not in repr(load_config(environ=env))  # a proxy URL may carry a password


def test_a_bad_proxy_url_fails_config() -> None:
    from kernel.errors import ConfigError

    with pytest.raises(ConfigError):
        load_config(environ={"HTTPS_PROXY": "socks5://p:1080"})
    with pytest.raises(ConfigError):
        load_config(environ={}, upstream={"proxy": {"https": "p:3128"}})
    assert no_env(proxy=ProxyConfig(from_env=False)).proxy.https is None
