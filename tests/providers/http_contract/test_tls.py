"""TLS: verified by default, a private CA through `tls.ca_file`, client certificates, SNI, and
a clear refusal for an expired certificate."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest
import trustme

from kernel.errors import ConfigError, ProviderConnectError
from providers.routes import Routes
from providers.settings import TLSConfig
from tests.providers.http_contract.conftest import SLOW_OK, MakeClient, no_env, post
from tests.providers.http_contract.servers import RawServer, keep_serving


def server_context(ca: trustme.CA, *, expired: bool = False, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if expired:
        now = datetime.datetime.now(datetime.UTC)
        cert = ca.issue_cert("localhost", "127.0.0.1", not_before=now - datetime.timedelta(days=30),
                             not_after=now - datetime.timedelta(days=1))
    else:
        cert = ca.issue_cert("localhost", "127.0.0.1", "upstream.test")
    cert.configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
    return context


async def test_a_certificate_from_an_unknown_ca_is_refused_by_default(make_client: MakeClient, ca: trustme.CA) -> None:
    client = make_client()
    async with RawServer(keep_serving(), tls=server_context(ca)) as server:
        with pytest.raises(ProviderConnectError) as info:
            await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
    assert "certificate" in info.value.message.lower()
    assert server.requests == []


async def test_ca_file_is_trusted(make_client: MakeClient, ca: trustme.CA, ca_file: Path) -> None:
    client = make_client(no_env(tls=TLSConfig(ca_file=str(ca_file))))
    async with RawServer(keep_serving(), tls=server_context(ca)) as server:
        resp = await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'


async def test_verify_off_accepts_any_certificate(make_client: MakeClient, ca: trustme.CA) -> None:
    client = make_client(no_env(tls=TLSConfig(verify=False)))
    async with RawServer(keep_serving(), tls=server_context(ca)) as server:
        resp = await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
        assert resp.status == 200
        await resp.read()


async def test_a_name_the_certificate_does_not_cover_is_refused(make_client: MakeClient, ca: trustme.CA, ca_file: Path) -> None:
    client = make_client(no_env(tls=TLSConfig(ca_file=str(ca_file))))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("other.test").configure_cert(context)
    async with RawServer(keep_serving(), tls=context) as server:
        with pytest.raises(ProviderConnectError) as info:
            await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
    assert "hostname" in info.value.message.lower() or "match" in info.value.message.lower()


async def test_an_expired_certificate_is_refused_with_a_clear_message(
    make_client: MakeClient, ca: trustme.CA, ca_file: Path
) -> None:
    client = make_client(no_env(tls=TLSConfig(ca_file=str(ca_file))))
    async with RawServer(keep_serving(), tls=server_context(ca, expired=True)) as server:
        with pytest.raises(ProviderConnectError) as info:
            await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
    assert "certificate has expired" in info.value.message


async def test_a_client_certificate_is_presented(make_client: MakeClient, ca: trustme.CA, ca_file: Path, tmp_path: Path) -> None:
    client_ca = trustme.CA()
    leaf = client_ca.issue_cert("gateway@example.test")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert_file))
    leaf.private_key_pem.write_to_path(str(key_file))
    tls = TLSConfig(ca_file=str(ca_file), cert_file=str(cert_file), key_file=str(key_file))
    with_cert = make_client(no_env(tls=tls))
    without = make_client(no_env(tls=TLSConfig(ca_file=str(ca_file))))
    async with RawServer(keep_serving(), tls=server_context(ca, client_ca=client_ca)) as server:
        resp = await asyncio.wait_for(with_cert.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'
        with pytest.raises(ProviderConnectError):
            resp = await asyncio.wait_for(without.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
            await resp.read()  # TLS 1.3 may report the refusal only once the server answers
    assert len(server.requests) == 1


async def test_the_upstream_name_is_sent_as_sni(make_client: MakeClient, ca: trustme.CA, ca_file: Path) -> None:
    names: list[str | None] = []
    context = server_context(ca)
    context.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment, misc]
    client = make_client(no_env(tls=TLSConfig(ca_file=str(ca_file))))
    async with RawServer(keep_serving(), tls=context) as server:
        resp = await asyncio.wait_for(client.send(post(server.url(host="localhost")), SLOW_OK, "e"), 30)
        await resp.read()
    assert names == ["localhost"]


def test_an_unreadable_ca_file_fails_start_up_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError) as info:
        Routes(no_env(tls=TLSConfig(ca_file=str(missing))))
    assert str(missing) in info.value.message


async def test_a_provider_tls_setting_replaces_the_default_for_that_provider_only(
    make_client: MakeClient, ca: trustme.CA, ca_file: Path
) -> None:
    from providers.settings import ProviderConfig

    async with RawServer(keep_serving(), tls=server_context(ca)) as server:
        base = server.url("/v1", host="localhost")
        own = ProviderConfig(name="p", base_url=base, tls=TLSConfig(ca_file=str(ca_file)))
        client = make_client(no_env(), [own])
        resp = await asyncio.wait_for(client.send(post(base + "/chat/completions"), SLOW_OK, "e"), 30)
        assert await resp.read() == b'{"ok": true}'
        with pytest.raises(ProviderConnectError):  # another upstream on the same server: system CAs only
            await asyncio.wait_for(client.send(post(server.url("/v2/x", host="127.0.0.1")), SLOW_OK, "e"), 30)
