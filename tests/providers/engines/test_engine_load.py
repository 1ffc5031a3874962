"""Reading a llama-server replica's load from its /metrics and /slots (httpx.MockTransport)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from providers.engines.load import EngineLoad, LoadUnreadable, parse_metrics, parse_slots, read_load

# The shape llama-server writes (tools/server/server-task.cpp, to_metrics), abridged.
METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 2104
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 96.5
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


def slot(id: int, processing: bool, prompt: int = 0, decoded: int = 0, n_ctx: int = 1000) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": id, "n_ctx": n_ctx, "speculative": False, "is_processing": processing}
    if prompt or decoded:
        entry |= {"id_task": 7, "n_prompt_tokens": prompt, "next_token": [{"has_next_token": processing, "n_decoded": decoded}]}
    return entry


def test_metrics_give_running_and_waiting_requests() -> None:
    assert parse_metrics(METRICS) == (4, 2)


@pytest.mark.parametrize("text", ["", "llamacpp:requests_processing 1\n", "not prometheus {{{\n"])
def test_metrics_without_the_gauges_are_unreadable(text: str) -> None:
    with pytest.raises(LoadUnreadable):
        parse_metrics(text)


def test_kv_usage_counts_the_tokens_of_busy_slots_only() -> None:
    slots = [slot(0, True, prompt=300, decoded=100), slot(1, False, prompt=900, decoded=50), slot(2, False), slot(3, True, prompt=2000)]
    # Busy: 400 + min(1000, 2000) of 4000 cells; the idle slot's 950 tokens are cache, not load.
    assert parse_slots(slots) == (4, pytest.approx(1400 / 4000))


@pytest.mark.parametrize("body", [[], {}, [1, 2], [{"id": 0}], [{"id": 0, "n_ctx": 0}], [{"n_ctx": "many"}]])
def test_slots_that_are_not_slots_are_unreadable(body: Any) -> None:
    with pytest.raises(LoadUnreadable):
        parse_slots(body)


def engine(metrics: bytes = METRICS.encode(), slots: bytes | None = None, status: int = 200) -> httpx.AsyncClient:
    slots_body = slots if slots is not None else orjson.dumps([slot(0, True, prompt=500), slot(1, False)])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(status, content=metrics)
        if request.url.path == "/slots":
            return httpx.Response(status, content=slots_body)
        return httpx.Response(404)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_read_load_asks_both_paths() -> None:
    async with engine() as client:
        load = await read_load(client, "http://127.0.0.1:9", now=12.5)
    assert load == EngineLoad(processing=4, deferred=2, slots=2, kv_usage=0.25, read_at=12.5)
    assert load.queued == 6


@pytest.mark.parametrize(
    ("client_args", "message"),
    [
        ({"status": 503}, "HTTP 503"),
        ({"slots": b"<html>"}, "not JSON"),
        ({"metrics": b"x" * (2 << 20)}, "over"),
    ],
)
async def test_a_bad_answer_is_unreadable_not_a_crash(client_args: dict[str, Any], message: str) -> None:
    async with engine(**client_args) as client:
        with pytest.raises(LoadUnreadable, match=message):
            await read_load(client, "http://127.0.0.1:9", now=0.0)


async def test_an_engine_that_does_not_answer_is_unreadable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(LoadUnreadable, match="ConnectError"):
            await read_load(client, "http://127.0.0.1:9", now=0.0)
