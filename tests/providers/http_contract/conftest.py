"""The contract suite runs every test against every registered client (`providers.clients.CLIENTS`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import orjson
import pytest
import trustme

from providers.base import UpstreamRequest
from providers.clients import CLIENTS
from providers.http import HTTPClient, Timeouts
from providers.routes import ProviderTransport, Routes
from providers.settings import ProxyConfig, UpstreamConfig

# Generous: these tests check what happens, not how fast; the timing tests set their own.
SLOW_OK = Timeouts(connect=5.0, first_byte=20.0, between_chunks=20.0, total=60.0)
MakeClient = Callable[..., HTTPClient]


def no_env(**fields: object) -> UpstreamConfig:
    """Upstream settings that never look at this machine's proxy variables."""
    proxy = fields.pop("proxy", ProxyConfig(from_env=False))
    return UpstreamConfig(proxy=proxy, **fields)  # type: ignore[arg-type]


def post(url: str, body: object = None, *, stream: bool = False, headers: dict[str, str] | None = None) -> UpstreamRequest:
    data = orjson.dumps(body if body is not None else {"model": "m"})
    return UpstreamRequest("POST", url, {"content-type": "application/json", **(headers or {})}, data, stream)


@pytest.fixture(params=sorted(CLIENTS))
def client_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_client(client_name: str) -> AsyncIterator[MakeClient]:
    made: list[HTTPClient] = []

    def make(upstream: UpstreamConfig | None = None, providers: Iterable[ProviderTransport] = ()) -> HTTPClient:
        upstream = upstream or no_env()
        client = CLIENTS[client_name](upstream, Routes(upstream, providers))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


@pytest.fixture
async def client(make_client: MakeClient) -> HTTPClient:
    return make_client()


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path
