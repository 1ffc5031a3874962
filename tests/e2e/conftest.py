"""End-to-end fixtures: real fake upstreams and the real gateway, served on loopback by uvicorn.

The servers share one event loop in a background thread (`tests.fakes.servers`), so the official
`openai` SDK's sync and async clients both talk to them over real sockets. Each test module gets its
own gateway (fresh breakers); the fake upstreams live for the session and are reset per test.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from operator import attrgetter
from typing import Any

import openai
import pytest

from gateway.app import create_app
from gateway.catalog import Endpoint
from gateway.config import Settings, load_config
from tests.fakes.catalog import make_endpoint
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

GATEWAY_KEY = "sk-gw-test-key-0001"
HASHED_KEY = "sk-gw-hashed-key-0002"
ADMIN_KEY = "sk-gw-admin-key-0003"
PROVIDER_KEY = "sk-upstream-secret-0004"
PROVIDER_KEY_ENV = "FAKE_UPSTREAM_KEY"

FIRST_BYTE = 0.5  # the gateway's first-byte timeout in these tests; "slow" upstreams wait longer
SLOW = 1.2

TIMEOUTS = {"connect": 0.5, "first_byte": FIRST_BYTE, "between_chunks": 1.0, "total": 5.0}
RETRY = {
    "attempts_per_endpoint": 2,
    "max_attempts": 6,
    "backoff_base": 0.01,
    "backoff_max": 0.05,
    "max_retry_after": 2.0,
}


def _pair(model: str, a_upstream: str, b_upstream: str = "b-ok") -> list[dict[str, Any]]:
    """Two deployments of `model`: on provider fake-a (tried first) and fake-b."""
    return [
        {"model": model, "provider": "fake-a", "upstream_model": a_upstream},
        {"model": model, "provider": "fake-b", "upstream_model": b_upstream},
    ]


def gateway_settings(upstream_url: str, llama_url: str, **overrides: Any) -> Settings:
    """The end-to-end gateway's config: one model per scenario (see the model names below)."""
    deployments: list[dict[str, Any]] = [
        {"model": "chat-model", "provider": "fake-a", "upstream_model": "gpt-fake"},
        {"model": "org/slash-model", "provider": "fake-a", "upstream_model": "slash-upstream"},
        {
            "model": "embed-model",
            "provider": "fake-a",
            "upstream_model": "embed-upstream",
            "capabilities": {"modes": ["embeddings"]},
        },
        {
            "model": "chat-only",
            "provider": "fake-a",
            "upstream_model": "chat-only-upstream",
            "capabilities": {"modes": ["chat"]},
        },
        {
            "model": "no-tools",
            "provider": "fake-a",
            "upstream_model": "no-tools-upstream",
            "capabilities": {"tools": False},
        },
        {
            "model": "few-logprobs",
            "provider": "fake-a",
            "upstream_model": "few-lp-upstream",
            "capabilities": {"max_top_logprobs": 2},
        },
        {"model": "llama-model", "provider": "llama", "upstream_model": "llama-upstream"},
        *_pair("fallback-500", "a@status:500"),
        *_pair("fallback-reset", "a@reset"),
        *_pair("fallback-slow", f"a@slow:{SLOW}"),
        *_pair("fallback-slow-stream", f"a@slow-stream:{SLOW}"),
        *_pair("fallback-invalid-json", "a@invalid-json"),
        *_pair("fallback-cut-body", "a@cut"),
        *_pair("fallback-error-first", "a@error-event:0"),
        *_pair("rejects", "a@status:400"),
        *_pair("retry-after-long", "a@status:429;retry-after=30"),
        {"model": "ratelimited", "provider": "fake-a", "upstream_model": "rl@status:429"},
        {"model": "retry-after", "provider": "fake-a", "upstream_model": "scripted-ra"},
        {"model": "all-500", "provider": "fake-a", "upstream_model": "x@status:500"},
        {"model": "all-500", "provider": "fake-b", "upstream_model": "y@reset"},
        {"model": "all-slow", "provider": "fake-a", "upstream_model": f"x@slow:{SLOW}"},
        {"model": "cut-stream", "provider": "fake-a", "upstream_model": "cut@cut:2"},
        {"model": "error-stream", "provider": "fake-a", "upstream_model": "err@error-event:2"},
        {"model": "early-end-stream", "provider": "fake-a", "upstream_model": "early@end-early:2"},
    ]
    config: dict[str, Any] = {
        "server": {"max_body_bytes": 64 * 1024},
        "auth": {
            "keys": [
                {"name": "plain", "key": GATEWAY_KEY},
                {"name": "hashed", "key": "sha256:" + hashlib.sha256(HASHED_KEY.encode()).hexdigest()},
            ],
            "admin_key": ADMIN_KEY,
        },
        "timeouts": TIMEOUTS,
        "retry": RETRY,
        # Scenario models fail on purpose: keep their breakers closed unless a test wants otherwise.
        "breaker": {"min_requests": 1000},
        "providers": [
            {"name": "fake-a", "kind": "openai", "base_url": upstream_url, "api_key_env": PROVIDER_KEY_ENV},
            {"name": "fake-b", "kind": "openai", "base_url": upstream_url},
            {"name": "llama", "kind": "llamacpp", "base_url": llama_url},
        ],
        "deployments": deployments,
    }
    config.update(overrides)
    return load_config(environ={PROVIDER_KEY_ENV: PROVIDER_KEY}, **config)


def not_ready_endpoint(model: str) -> Endpoint:
    """An endpoint whose engine is (re)starting: `ready()` is False."""
    return make_endpoint(f"local/{model}", model, base_url="http://127.0.0.1:9/v1", ready=lambda: False)


# -- servers -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def servers() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop().start()
    yield loop
    loop.stop()


@pytest.fixture(scope="session")
def upstream_server(servers: BackgroundLoop) -> Iterator[FakeOpenAIUpstream]:
    upstream = servers.call(FakeOpenAIUpstream().start())
    yield upstream
    servers.call(upstream.stop())


@pytest.fixture(scope="session")
def llama_server(servers: BackgroundLoop) -> Iterator[FakeOpenAIUpstream]:
    upstream = servers.call(FakeOpenAIUpstream(llamacpp_quirks=True).start())
    yield upstream
    servers.call(upstream.stop())


@pytest.fixture
def upstream(upstream_server: FakeOpenAIUpstream) -> FakeOpenAIUpstream:
    upstream_server.reset()
    return upstream_server


@pytest.fixture
def llama(llama_server: FakeOpenAIUpstream) -> FakeOpenAIUpstream:
    llama_server.reset()
    return llama_server


@pytest.fixture(scope="session")
def retiring(servers: BackgroundLoop) -> Iterator[list[GatewayServer]]:
    """Per-test gateways shut down in the background (uvicorn takes 0.2 s); all are awaited at the end."""
    stopping: list[GatewayServer] = []
    yield stopping
    for server in stopping:
        server.wait_stopped()


@pytest.fixture
def start_gateway(servers: BackgroundLoop, retiring: list[GatewayServer]) -> Iterator[Callable[..., GatewayServer]]:
    """Start a gateway with the given settings for one test."""
    started: list[GatewayServer] = []

    def start(settings: Settings, **app_kwargs: Any) -> GatewayServer:
        server = GatewayServer(create_app(settings, **app_kwargs), servers).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.request_stop()
        retiring.append(server)


@pytest.fixture
def fresh_gateway(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, llama: FakeOpenAIUpstream
) -> GatewayServer:
    """The end-to-end gateway, but one of its own for one test: breakers and routing feedback start
    empty. Modules whose assertions depend on which endpoint is tried first use it as `gateway`."""
    return start_gateway(gateway_settings(upstream.url, llama.url), extra_endpoints=[not_ready_endpoint("unavailable")])


@pytest.fixture(scope="module")
def gateway(
    servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream, llama_server: FakeOpenAIUpstream
) -> Iterator[GatewayServer]:
    settings = gateway_settings(upstream_server.url, llama_server.url)
    app = create_app(settings, extra_endpoints=[not_ready_endpoint("unavailable")])
    server = GatewayServer(app, servers).start()
    yield server
    server.stop()


# -- clients -------------------------------------------------------------------------


def sync_client(server: GatewayServer, api_key: str = GATEWAY_KEY) -> openai.OpenAI:
    # Plain http on loopback: skipping TLS set-up makes a client cost 1 ms instead of 50.
    return openai.OpenAI(
        base_url=server.url,
        api_key=api_key,
        max_retries=0,
        timeout=10,
        http_client=openai.DefaultHttpxClient(verify=False),
    )


def async_client(server: GatewayServer, api_key: str = GATEWAY_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=server.url,
        api_key=api_key,
        max_retries=0,
        timeout=10,
        http_client=openai.DefaultAsyncHttpxClient(verify=False),
    )


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> Iterator[openai.OpenAI]:
    with sync_client(gateway) as c:
        yield c


@pytest.fixture
async def aclient(gateway: GatewayServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with async_client(gateway) as c:
        yield c


class SDK:
    """One test body for both the sync and the async client: `await sdk.call("chat.completions.create", ...)`."""

    def __init__(self, client: openai.OpenAI | openai.AsyncOpenAI) -> None:
        self.client = client
        self.is_async = isinstance(client, openai.AsyncOpenAI)

    async def call(self, path: str, *args: Any, **kwargs: Any) -> Any:
        result = attrgetter(path)(self.client)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def collect(self, stream: Any) -> list[Any]:
        if self.is_async:
            return [chunk async for chunk in stream]
        return list(stream)

    async def collect_until_error(self, stream: Any) -> tuple[list[Any], BaseException | None]:
        """The chunks received before the stream raised, and what it raised (None if it ended cleanly)."""
        chunks: list[Any] = []
        try:
            if self.is_async:
                async for chunk in stream:
                    chunks.append(chunk)
            else:
                for chunk in stream:
                    chunks.append(chunk)
        except Exception as exc:  # noqa: BLE001 - the caller asserts on the exact type
            return chunks, exc
        return chunks, None


@pytest.fixture(params=["sync", "async"])
async def sdk_factory(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., SDK]]:
    """Build SDK clients (sync or async, per the parameter) for any gateway; closed after the test."""
    clients: list[openai.OpenAI | openai.AsyncOpenAI] = []

    def make(server: GatewayServer, api_key: str = GATEWAY_KEY) -> SDK:
        client = (sync_client if request.param == "sync" else async_client)(server, api_key)
        clients.append(client)
        return SDK(client)

    yield make
    for client in clients:
        closed = client.close()
        if inspect.isawaitable(closed):
            await closed


@pytest.fixture
def sdk(sdk_factory: Callable[..., SDK], gateway: GatewayServer) -> SDK:
    """A client of the module's gateway; tests that take it run once with each client."""
    return sdk_factory(gateway)
