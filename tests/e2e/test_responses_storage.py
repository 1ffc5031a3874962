"""Where stored responses live, with the official `openai` SDK as the client. What one may take
(`responses.max_stored_bytes`): over the cap the answer still comes, says `store: false` and is
not kept, and a `previous_response_id` chain ends where its conversation outgrows the cap. The
durable copy (`responses.durable`): a replica whose state store never saw a response (Redis
restarted, evicted) reads it from the database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.state_store.memory import MemoryStore
from tests.e2e.conftest import sync_client
from tests.e2e.test_responses import settings_for
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

CAP = 32 * 1024


@pytest.fixture(scope="module")
def client(servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream) -> Iterator[openai.OpenAI]:
    settings = settings_for(
        upstream_server.url,
        upstream_server.url,
        responses={"max_stored_bytes": CAP},
        # Room for inputs many times the cap: the store's cap is what is tested, not the model's window.
        deployments=[
            {"model": "chat-model", "provider": "fake", "upstream_model": "gpt-fake", "context_window": 10**6}
        ],
    )
    server = GatewayServer(create_app(settings), servers).start()
    try:
        with sync_client(server) as c:
            yield c
    finally:
        server.stop()


def test_a_small_response_is_stored(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="chat-model", input="short")
    assert resp.store is True
    assert client.responses.retrieve(resp.id).output_text == "You said: short"


def test_a_huge_input_is_answered_but_not_stored(client: openai.OpenAI) -> None:
    # A hostile input many times the cap (and far under the body limit): the upstream's answer
    # comes back whole; nothing is kept, and the answer says so.
    huge = "x" * (8 * CAP)
    resp = client.responses.create(model="chat-model", input=huge)
    assert resp.output_text == f"You said: {huge}"
    assert resp.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="chat-model", input="more", previous_response_id=resp.id)
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_a_streamed_huge_response_ends_with_store_false(client: openai.OpenAI) -> None:
    huge = "y" * (4 * CAP)
    with client.responses.stream(model="chat-model", input=huge) as stream:
        events = list(stream)
        final = stream.get_final_response()
    # `response.created` echoed the request's `store: true`; the completion says what happened.
    assert events[0].type == "response.created" and events[0].response.store is True
    assert events[-1].type == "response.completed" and events[-1].response.store is False
    assert final.store is False and final.output_text == f"You said: {huge}"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(final.id)


def test_a_chain_ends_where_its_conversation_outgrows_the_cap(client: openai.OpenAI) -> None:
    # Each turn adds about 2 * CAP / 8 bytes (the input and its echo) to the stored conversation.
    turn = "z" * (CAP // 8)
    chain: list[openai.types.responses.Response] = []
    previous = None
    for _ in range(16):
        resp = client.responses.create(model="chat-model", input=turn, previous_response_id=previous)
        chain.append(resp)
        if not resp.store:
            break
        previous = resp.id
    *kept, last = chain
    assert last.store is False, "the conversation never outgrew the cap"
    assert len(kept) >= 2  # the first turns fit
    for resp in kept:  # what fitted is still there, with the whole conversation up to it
        assert client.responses.retrieve(resp.id).output_text == f"You said: {turn}"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="chat-model", input=turn, previous_response_id=last.id)
    # The chain can go on from its last stored turn (the caller decides what to drop, not the store).
    again = client.responses.create(model="chat-model", input="short", previous_response_id=kept[-1].id)
    assert again.output_text == "You said: short"


# -- the durable copy in the database ------------------------------------------------------


def durable_settings(upstream_url: str, db_path: Path, **responses: Any) -> Settings:
    url = f"sqlite:///{db_path}"
    engine = make_engine(DatabaseConfig(url=url))
    migrate.upgrade(engine)
    engine.dispose()
    return settings_for(
        upstream_url,
        upstream_url,
        responses=responses,
        database={"url": url, "connect_timeout": 2},
        persistence={"enabled": True, "spill_path": str(db_path.with_suffix(".spill")), "shutdown_timeout": 5},
    )


def replica(settings: Settings, servers: BackgroundLoop) -> GatewayServer:
    """A gateway with a state store of its own: what another replica after a Redis restart sees."""
    return GatewayServer(create_app(settings, store=MemoryStore()), servers).start()


@pytest.mark.parametrize("durable", [True, False])
def test_a_response_outlives_its_state_store_when_durable(
    servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream, tmp_path: Path, durable: bool
) -> None:
    settings = durable_settings(upstream_server.url, tmp_path / "gateway.db", durable=durable)
    first = replica(settings, servers)
    try:
        with sync_client(first) as c:
            created = c.responses.create(model="chat-model", input="my name is Ada")
            assert c.responses.retrieve(created.id).id == created.id  # from the state store
    finally:
        first.stop()  # its shutdown writes what is still queued
    second = replica(settings, servers)
    try:
        with sync_client(second) as c:
            if not durable:  # the default: the state store was the only copy
                with pytest.raises(openai.NotFoundError):
                    c.responses.retrieve(created.id)
                return
            again = c.responses.retrieve(created.id)
            assert again.model_dump() == created.model_dump()
            follow = c.responses.create(model="chat-model", input="what is it?", previous_response_id=created.id)
            assert follow.previous_response_id == created.id
            c.responses.delete(created.id)
            with pytest.raises(openai.NotFoundError):
                c.responses.retrieve(created.id)  # gone from both copies
    finally:
        second.stop()
