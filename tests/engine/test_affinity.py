"""KV affinity on the bundled engine, end to end: with two replicas, a conversation's later turns go
to the replica that holds its prefix, the gateway predicts the hit (`x-gateway-route: ...; hit=`),
and the engine's reported `cached_tokens` confirm it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.conftest import MODEL, Gateway

pytestmark = pytest.mark.engine

SYSTEM = "You are a librarian. " + " ".join(f"Shelf {i} holds books about topic {i}." for i in range(80))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("engine-affinity"), replicas=2)
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


def test_later_turns_go_where_the_prefix_is_and_the_engine_confirms_the_hit(pair: Gateway) -> None:
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    turns = []
    with pair.client() as client:
        for question in ("Which shelf has topic 3?", "And topic 9?", "And topic 27?"):
            messages.append({"role": "user", "content": question})
            raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
            completion = raw.parse()
            assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
            route = raw.headers["x-gateway-route"]
            hit = float(route.rsplit("hit=", 1)[1].split(";")[0]) if "hit=" in route else 0.0
            turns.append((raw.headers["x-gateway-endpoint"], hit, completion.usage.prompt_tokens,
                          completion.usage.prompt_tokens_details.cached_tokens or 0))
            messages.append({"role": "assistant", "content": completion.choices[0].message.content or ""})
    (first_endpoint, _, _, first_cached), *later = turns
    assert first_cached == 0, turns  # cold
    for endpoint, predicted, prompt, cached in later:
        assert endpoint == first_endpoint, turns
        assert predicted > 0.7, turns  # the gateway expected most of the prompt cached there...
        assert cached > 0.7 * prompt, turns  # ...and the engine says it was
