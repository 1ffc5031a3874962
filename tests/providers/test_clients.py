"""The client registry and the `upstream.client` setting name the same clients."""

from __future__ import annotations

import typing

from providers.clients import CLIENTS, client_factory
from providers.http import AiohttpClient
from providers.settings import UpstreamConfig


def test_every_configurable_client_is_registered() -> None:
    names = typing.get_args(UpstreamConfig.model_fields["client"].annotation)
    assert set(names) == set(CLIENTS)


async def test_the_default_is_aiohttp() -> None:
    client = client_factory(UpstreamConfig())()
    try:
        assert isinstance(client, AiohttpClient)
    finally:
        await client.aclose()
