"""The out-of-the-box engines (deploy/config/local.yaml, what scripts/serve.sh runs) through the
gateway, as the official SDK sees them: embeddings from the second engine, and four concurrent
streams on the chat engine's four slots that all finish (with the engine's own count of running
requests showing them decoded together). Time limits come from a stream measured first."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.engine.conftest import MODEL, REPO_ROOT, Gateway

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
    with quickstart.client() as client, pytest.raises(Exception):
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
