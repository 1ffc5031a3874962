"""The audit-start template check on an honest cross-engine pair: the bundled engine (llama-server
with --jinja and the model's own template) and llama-cpp-python's `Llama` rendering the GGUF's
template (the testbed) report the same prompt_tokens for the same messages, so the audit keeps
the reference; and the bundled engine's top logprobs come back exactly k, sorted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from probes.budget import ProbeBudget
from probes.client import ProbeClient
from probes.template_check import MESSAGES, check
from probes.testbed.harness import EndpointSpec, Testbed
from providers.http import AiohttpClient, Timeouts
from tests.engine.conftest import KEY, MODEL, Gateway
from tests.fakes.catalog import make_endpoint


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    with Testbed([EndpointSpec("ref", model="smollm2")]) as tb:
        yield tb


async def test_the_bundled_engine_and_the_gguf_template_render_alike(gateway: Gateway, testbed: Testbed) -> None:
    http = AiohttpClient()
    budget = ProbeBudget(requests_per_day=0, tokens_per_day=0, clock=time.time)
    timeouts = Timeouts(connect=5.0, first_byte=60.0, between_chunks=60.0, total=120.0)
    engine = ProbeClient(make_endpoint("local/smollm2", MODEL, base_url=gateway.url + "/v1", api_key=KEY), http,
                         timeouts, budget)
    llama = ProbeClient(make_endpoint("testbed/ref", "smollm2", base_url=testbed.base_url("ref")), http, timeouts, budget)
    try:
        result = await check(engine, llama)
        assert result.status == "same", result.reason
        assert all(n is not None and n > 10 for n in result.endpoint) and len(result.endpoint) == len(MESSAGES)
        answer = await engine.chat({"messages": MESSAGES[0], "max_tokens": 2, "temperature": 0, "logprobs": True,
                                    "top_logprobs": 5})
        for token in answer["choices"][0]["logprobs"]["content"]:
            values = [t["logprob"] for t in token["top_logprobs"]]
            assert len(values) == 5 and values == sorted(values, reverse=True)
            assert len({t["token"] for t in token["top_logprobs"]}) == 5
    finally:
        await http.aclose()


async def test_repeated_prompts_report_one_prompt_count_on_both_engines(gateway: Gateway, testbed: Testbed) -> None:
    """What the usage-consistency check relies on: the same messages sent again (the engine's
    prompt cache reused, other sampling parameters) report the same prompt_tokens."""
    http = AiohttpClient()
    budget = ProbeBudget(requests_per_day=0, tokens_per_day=0, clock=time.time)
    timeouts = Timeouts(connect=5.0, first_byte=60.0, between_chunks=60.0, total=120.0)
    clients = [
        ProbeClient(make_endpoint("local/smollm2", MODEL, base_url=gateway.url + "/v1", api_key=KEY), http,
                    timeouts, budget),
        ProbeClient(make_endpoint("testbed/ref", "smollm2", base_url=testbed.base_url("ref")), http, timeouts, budget),
    ]
    try:
        for client in clients:
            for i in range(4):
                for messages in MESSAGES:
                    await client.chat({"messages": messages, "max_tokens": 1 + i, "temperature": i / 2, "seed": i})
            counts: dict[str, set[int]] = {}
            for fingerprint, n in client.prompt_counts:
                counts.setdefault(fingerprint, set()).add(n)
            assert len(counts) == len(MESSAGES) and all(len(v) == 1 for v in counts.values()), counts
    finally:
        await http.aclose()
