"""The out-of-the-box engines (deploy/config/local.yaml, what scripts/serve.sh runs) through the
gateway, as the official SDKs see them: embeddings from the second engine, four concurrent streams
on the chat engine's four slots that all finish (with the engine's own count of running requests
showing them decoded together), and the Node SDK's view of usage in streams, logprobs, cached
tokens, embeddings, tool calls and concurrent streams. Time limits come from an answer measured first."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.engine.conftest import KEY, MODEL, REPO_ROOT, Gateway

pytestmark = pytest.mark.engine

EMBED_MODEL = "smollm2-135m-embed"
STORY = [{"role": "user", "content": "Write a long story about a dragon who lives in a river."}]
TOKENS = 48


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    engines = yaml.safe_load((REPO_ROOT / "deploy/config/local.yaml").read_text())["engines"]
    assert {e["served_model_name"] for e in engines} == {MODEL, EMBED_MODEL}
    gw = Gateway(tmp_path_factory.mktemp("quickstart"), engines=engines)
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


def test_embeddings_come_from_the_embeddings_engine(quickstart: Gateway) -> None:
    with quickstart.client() as client:
        result = client.embeddings.create(model=EMBED_MODEL, input=["The cat sat on the mat.", "Stock prices fell today."])
        again = client.embeddings.create(model=EMBED_MODEL, input="The cat sat on the mat.")
    a, b = (d.embedding for d in result.data)
    assert [d.index for d in result.data] == [0, 1] and len(a) == len(b) == 576  # SmolLM2-135M's hidden size
    assert all(math.isfinite(x) for x in a) and abs(math.hypot(*a) - 1) < 1e-3  # normalised
    # The same vector alone as batched with another input (not so with one KV buffer per slot).
    assert a != b and again.data[0].embedding == pytest.approx(a, abs=1e-4)
    assert result.usage.prompt_tokens > 0
    # The chat model is not served for embeddings, nor the embedding engine for chat.
    with quickstart.client() as client, pytest.raises(Exception):  # noqa: B017 (any refusal: the SDK's error class varies by status)
        client.chat.completions.create(model=EMBED_MODEL, messages=STORY, max_tokens=2)


async def stream(client: Any, tokens: int) -> dict[str, Any]:
    started = time.monotonic()
    chunks = [c async for c in await client.chat.completions.create(
        model=MODEL, messages=STORY, max_tokens=tokens, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    return {"took": time.monotonic() - started, "finishes": finishes, "tokens": usage.completion_tokens if usage else 0}


async def test_four_concurrent_streams_all_finish_on_four_slots(quickstart: Gateway) -> None:
    (replica,) = quickstart.replicas("local")
    engine_root = replica["base_url"].removesuffix("/v1")
    async with quickstart.async_client() as client:
        single = await stream(client, TOKENS)
        # Four streams share one core: about four times the work, with a wide margin for a loaded box.
        limit = 4 * single["took"] * 3 + 10
        running: list[int] = []

        async def watch(done: asyncio.Event) -> None:
            async with httpx.AsyncClient(base_url=engine_root, timeout=5) as engine:
                while not done.is_set():
                    text = (await engine.get("/metrics")).text
                    running.append(int(float(next(
                        line.split()[1] for line in text.splitlines() if line.startswith("llamacpp:requests_processing ")
                    ))))
                    await asyncio.sleep(0.05)

        done = asyncio.Event()
        watcher = asyncio.create_task(watch(done))
        try:
            results = await asyncio.wait_for(asyncio.gather(*(stream(client, TOKENS) for _ in range(4))), limit)
        finally:
            done.set()
            await watcher
    assert single["finishes"] == ["length"] and single["tokens"] == TOKENS
    assert [r["finishes"] for r in results] == [["length"]] * 4
    assert [r["tokens"] for r in results] == [TOKENS] * 4
    assert max(running) == 4  # decoded together, not one after the other


def test_the_node_sdk_sees_the_same(quickstart: Gateway) -> None:
    node_dir = REPO_ROOT / "tests/e2e/node"
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: scripts/test.sh installs it"
    assert (node_dir / "node_modules" / "openai").is_dir(), "the Node SDK is missing: run `npm ci` in tests/e2e/node"
    # One short answer, timed, bounds every check (the longest: four 24-token streams at once).
    with quickstart.client() as client:
        started = time.monotonic()
        client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=24, extra_body={"ignore_eos": True})
        per_answer = time.monotonic() - started
    timeout_s = 10 + 20 * per_answer
    done = subprocess.run(
        [node, str(node_dir / "engine_check.mjs"), quickstart.url + "/v1", KEY, str(int(timeout_s * 1000))],
        cwd=node_dir, capture_output=True, text=True, timeout=10 * timeout_s, check=True,
    )
    out = json.loads(done.stdout)
    assert out["streamUsage"]["lastChoices"] == 0 and out["streamUsage"]["usage"]["completion_tokens"] > 0
    for token in out["logprobs"]:
        values = [t["logprob"] for t in token["top"]]
        assert len(values) == 5 and values == sorted(values, reverse=True)
        assert token["bytes"] and all(t["bytes"] is not None for t in token["top"])
    again = out["cached"]["again"]
    assert again["prompt_tokens_details"]["cached_tokens"] > 0.8 * out["cached"]["first"]["prompt_tokens"]
    assert out["embeddings"] == {"count": 2, "dims": [576, 576]}
    assert out["toolCall"]["finish"] == "tool_calls" and out["toolCall"]["calls"]
    assert all(c["name"] == "get_weather" and json.loads(c["arguments"])["city"] for c in out["toolCall"]["calls"])
    assert out["toolAuto"]["hasAnswer"]
    assert [s["finish"] for s in out["fourStreams"]] == [["length"]] * 4
    assert [s["tokens"] for s in out["fourStreams"]] == [24] * 4
