"""Large non-streamed answers through the whole gateway: a 30 MiB embeddings batch and an n=8
chat with 20 top logprobs per token (about 20 MiB), both answered in full. The old hand-written
client paused reading at 1 MiB and never resumed for a whole-body read, so both hung."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import orjson

from tests.e2e.conftest import GATEWAY_KEY, gateway_settings
from tests.fakes.openai_upstream import FakeOpenAIUpstream, embedding_for
from tests.fakes.servers import GatewayServer

AUTH = {"authorization": f"Bearer {GATEWAY_KEY}"}
# Generous: these answers take seconds to generate on a loaded 2-core machine.
TIMEOUTS = {"connect": 5.0, "first_byte": 120.0, "between_chunks": 60.0, "total": 300.0}
INPUTS, DIMENSIONS = 2048, 1536


def post(url: str, body: dict[str, object], headers: dict[str, str] | None = None) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    resp = httpx.post(url, content=orjson.dumps(body), headers={"content-type": "application/json", **(headers or {})},
                      timeout=300)
    return resp, time.perf_counter() - start


def test_a_30_mib_embeddings_batch_is_answered_in_full_and_within_3x_of_direct(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, llama: FakeOpenAIUpstream
) -> None:
    gateway = start_gateway(gateway_settings(upstream.url, llama.url, timeouts=TIMEOUTS))
    inputs = [f"t{i}" for i in range(INPUTS)]
    body = {"input": inputs, "dimensions": DIMENSIONS, "encoding_format": "float"}

    direct, direct_s = post(upstream.url + "/embeddings", {**body, "model": "embed-upstream"})
    assert direct.status_code == 200
    via, via_s = post(gateway.url + "/embeddings", {**body, "model": "embed-model"}, AUTH)

    assert via.status_code == 200, via.text[:500]
    size = len(via.content)
    data = via.json()["data"]
    assert len(data) == INPUTS and [d["index"] for d in data] == list(range(INPUTS))
    for i in (0, 1, INPUTS // 2, INPUTS - 1):
        assert data[i]["embedding"] == embedding_for(inputs[i], DIMENSIONS)
    assert all(len(d["embedding"]) == DIMENSIONS for d in data)
    print(f"\nembeddings: {size / 2**20:.1f} MiB; direct {direct_s:.2f} s, through the gateway {via_s:.2f} s "
          f"({via_s / direct_s:.2f}x)")
    assert size > 25 * 2**20
    # The bound, against the same request made directly in this run (the fake's own
    # generation dominates both, so machine load scales them alike).
    assert via_s < 3 * direct_s


def test_n8_with_20_top_logprobs_over_2000_tokens_is_answered_in_full(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, llama: FakeOpenAIUpstream
) -> None:
    gateway = start_gateway(gateway_settings(upstream.url, llama.url, timeouts=TIMEOUTS))
    words = " ".join(f"w{i}" for i in range(2100))
    body = {
        "model": "chat-model",
        "messages": [{"role": "user", "content": words}],
        "n": 8,
        "logprobs": True,
        "top_logprobs": 20,
        "max_tokens": 2000,
    }
    resp, took = post(gateway.url + "/chat/completions", body, AUTH)

    assert resp.status_code == 200, resp.text[:500]
    answer = resp.json()
    print(f"\nn=8 chat with logprobs: {len(resp.content) / 2**20:.1f} MiB in {took:.2f} s")
    assert len(resp.content) > 2**20
    assert [c["index"] for c in answer["choices"]] == list(range(8))
    for choice in answer["choices"]:
        tokens = choice["logprobs"]["content"]
        assert len(tokens) == 2000 and choice["finish_reason"] == "length"
        assert all(len(t["top_logprobs"]) == 20 for t in tokens)
        assert "".join(t["token"] for t in tokens) == choice["message"]["content"]
    assert answer["usage"]["completion_tokens"] == 8 * 2000


def test_an_answer_past_max_response_bytes_is_a_502_and_not_retried(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, llama: FakeOpenAIUpstream
) -> None:
    limits = {"limits": {"max_response_bytes": 2**20}}
    gateway = start_gateway(gateway_settings(upstream.url, llama.url, timeouts=TIMEOUTS, upstream=limits))
    body = {"model": "embed-model", "input": [f"t{i}" for i in range(256)], "dimensions": 1536}
    resp, _ = post(gateway.url + "/embeddings", body, AUTH)

    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["code"] == "upstream_response_too_large" and "max_response_bytes" in error["message"]
    assert len(upstream.requests_for("embed-upstream")) == 1  # the same request would be as large again
