"""What llama-server gets wrong against the OpenAI API, each shown on the real engine (the bundled
SmolLM2, supervised), next to the same request as `LlamaCppAdapter` sends it."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from gateway.engines import engine_adapter
from providers.base import Target
from providers.engines import EngineSupervisor
from providers.engines.config import EngineConfig
from tests.services import needs_llama_server

pytestmark = [
    pytest.mark.engine,
    needs_llama_server(),
]

MODEL = "smollm2-135m-instruct"
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
CFG = EngineConfig(n_ctx=1024)


@pytest.fixture
async def engine() -> AsyncIterator[EngineSupervisor]:
    sup = EngineSupervisor(CFG)
    await sup.start()
    yield sup
    await sup.stop()


def as_adapter_sends(body: dict[str, Any]) -> dict[str, Any]:
    target = Target(endpoint_id="local-0", base_url="http://unused/v1", upstream_model=MODEL, public_model=MODEL)
    return dict(orjson.loads(engine_adapter(CFG).build_request(target, "chat", {"model": MODEL, **body}, False).body))


async def chat(engine: EngineSupervisor, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=engine.replicas[0].base_url, timeout=120) as client:
        return await client.post("/chat/completions", json={"model": MODEL, **body})


async def test_its_default_sampling_is_not_openais(engine: EngineSupervisor) -> None:
    async def sampling_of_last_request() -> dict[str, float]:
        async with httpx.AsyncClient(base_url=engine.replicas[0].base_url.removesuffix("/v1"), timeout=10) as client:
            slots = (await client.get("/slots")).json()
        (params,) = [s["params"] for s in slots if s.get("id_task") == max(x.get("id_task", -1) for x in slots)]
        return {k: round(params[k], 3) for k in ("temperature", "top_p", "top_k", "min_p")}

    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert (await chat(engine, body)).status_code == 200
    assert await sampling_of_last_request() == {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05}
    assert (await chat(engine, as_adapter_sends(body))).status_code == 200
    assert await sampling_of_last_request() == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}


async def test_a_named_tool_choice_is_ignored(engine: EngineSupervisor) -> None:
    body = {"messages": WEATHER_Q, "tools": [TIME, WEATHER], "temperature": 0, "max_tokens": 40,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    raw = (await chat(engine, body)).json()["choices"][0]
    assert raw["finish_reason"] in ("stop", "length") and not raw["message"].get("tool_calls")  # text, no call
    fixed = (await chat(engine, as_adapter_sends(body | {"max_tokens": 200}))).json()["choices"][0]
    assert fixed["finish_reason"] == "tool_calls"
    assert {c["function"]["name"] for c in fixed["message"]["tool_calls"]} == {"get_weather"}


async def test_required_lets_the_model_talk_instead_of_calling(engine: EngineSupervisor) -> None:
    body = {"messages": WEATHER_Q, "tools": [WEATHER, TIME], "tool_choice": "required", "temperature": 0, "max_tokens": 40}
    raw = (await chat(engine, body)).json()["choices"][0]
    assert raw["finish_reason"] == "length" and not raw["message"].get("tool_calls") and raw["message"]["content"]
    fixed = (await chat(engine, as_adapter_sends(body | {"max_tokens": 200}))).json()["choices"][0]
    assert fixed["finish_reason"] == "tool_calls" and fixed["message"]["tool_calls"]


async def test_its_tool_call_ids_are_not_openais(engine: EngineSupervisor) -> None:
    # 32 random letters and digits (llama.cpp's gen_tool_call_id); OpenAI's begin with `call_`.
    body = as_adapter_sends({"messages": WEATHER_Q, "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 200})
    target = Target(endpoint_id="local-0", base_url=engine.replicas[0].base_url, upstream_model=MODEL, public_model=MODEL)
    adapter = engine_adapter(CFG)
    raw = await chat(engine, body)
    ids = [c["id"] for c in raw.json()["choices"][0]["message"]["tool_calls"]]
    assert ids and all(re.fullmatch(r"[0-9A-Za-z]{32}", i) for i in ids), ids
    fixed = orjson.loads(adapter.parse_response(target, "chat", raw.content).body)
    assert [c["id"] for c in fixed["choices"][0]["message"]["tool_calls"]] == [f"call_{i}" for i in ids]

    translator = adapter.stream_translator(target, "chat", {**body, "stream": True})
    raw_ids, fixed_ids = [], []
    async with httpx.AsyncClient(base_url=engine.replicas[0].base_url, timeout=120) as client:
        async with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                raw_ids += [c["id"] for ch in orjson.loads(line[6:]).get("choices", []) for c in ch["delta"].get("tool_calls") or [] if "id" in c]
                for payload in translator.feed(None, line[6:].encode()).payloads:
                    fixed_ids += [c["id"] for ch in orjson.loads(payload)["choices"] for c in ch["delta"].get("tool_calls") or [] if "id" in c]
    assert raw_ids and all(re.fullmatch(r"[0-9A-Za-z]{32}", i) for i in raw_ids), raw_ids
    assert fixed_ids == [f"call_{i}" for i in raw_ids]


async def test_parallel_tool_calls_false_still_gets_several_calls(engine: EngineSupervisor) -> None:
    # Sampled (OpenAI's temperature 1), so asked several times: its grammar allows one or more calls.
    body = as_adapter_sends({"messages": WEATHER_Q, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 200,
                             "parallel_tool_calls": False, "seed": 7})
    target = Target(endpoint_id="local-0", base_url=engine.replicas[0].base_url, upstream_model=MODEL, public_model=MODEL)
    raw_counts, fixed = [], []
    for seed in range(8):
        raw = await chat(engine, body | {"seed": seed})
        raw_counts.append(len(raw.json()["choices"][0]["message"].get("tool_calls") or []))
        fixed.append(orjson.loads(engine_adapter(CFG).parse_response(target, "chat", raw.content, request=body).body))
    assert max(raw_counts) > 1, raw_counts
    for answer in fixed:
        choice = answer["choices"][0]
        assert len(choice["message"]["tool_calls"]) == 1 and choice["finish_reason"] == "tool_calls", choice


async def test_an_assistant_turn_without_content_is_a_400(engine: EngineSupervisor) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}, {"role": "user", "content": "hello"}], "max_tokens": 2}
    raw = await chat(engine, body)
    assert raw.status_code == 400 and "must contain either 'content' or 'tool_calls'" in raw.json()["error"]["message"]
    assert (await chat(engine, as_adapter_sends(body))).status_code == 200


async def test_n_beyond_its_slots_is_a_400(engine: EngineSupervisor) -> None:
    raw = await chat(engine, {"messages": WEATHER_Q, "max_tokens": 1, "n": CFG.parallel + 1})
    assert raw.status_code == 400 and "'n'" in raw.json()["error"]["message"]  # hence the gateway's fan-out


async def test_it_drops_a_keep_alive_connection_idle_for_5_s(engine: EngineSupervisor) -> None:
    url = urlsplit(engine.replicas[0].base_url)
    request = f"GET /health HTTP/1.1\r\nHost: {url.hostname}\r\nConnection: keep-alive\r\n\r\n".encode()

    def idle_then_read() -> bytes:
        with socket.create_connection((url.hostname, url.port), timeout=10) as s:
            s.sendall(request)
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(6)
            return s.recv(4096)  # b"": the engine closed it

    assert await asyncio.to_thread(idle_then_read) == b""
    sent = engine_adapter(CFG).build_request(
        Target(endpoint_id="l", base_url="http://x/v1", upstream_model=MODEL, public_model=MODEL), "chat", {"messages": []}, False
    )
    assert sent.headers["connection"] == "close"


async def test_a_call_cut_before_its_name_ends_is_text(engine: EngineSupervisor) -> None:
    # Not normalised (nothing to recover): the call's first characters come back as content.
    body = as_adapter_sends({"messages": WEATHER_Q, "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 4})
    choice = (await chat(engine, body)).json()["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls")
    assert choice["message"]["content"].startswith('{"name"')


async def test_an_answer_depends_on_what_it_served_before_unless_cache_prompt_is_off(engine: EngineSupervisor) -> None:
    """The T=0 logprobs of a short prompt move after long prompts (their cached template prefix was
    computed in a large batch), and come back with `cache_prompt: false`: a reference compared by
    equality must not carry its history (`probes.runner.make_client_factory`), measured by
    bench/reference_cache_state.py."""

    async def top(prompt: str, **extra: Any) -> dict[str, float]:
        answer = (await chat(engine, as_adapter_sends({
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 1, "temperature": 0, "logprobs": True,
            "top_logprobs": 20, **extra}))).json()
        return {t["token"]: t["logprob"] for t in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}

    prompts = ("x", "Qz", "the 7")
    fresh = [await top(p) for p in prompts]
    long = "The quick brown fox jumps over the lazy dog. " * 80  # about 800 tokens: a 512-token batch first
    for i in range(3):
        await chat(engine, as_adapter_sends({"messages": [{"role": "user", "content": long + str(i)}], "max_tokens": 4}))

    def gap(a: dict[str, float], b: dict[str, float]) -> float:
        return max(abs(a[t] - b[t]) for t in set(a) & set(b))

    after = [await top(p) for p in prompts]
    assert max(gap(a, b) for a, b in zip(fresh, after, strict=True)) > 0.01
    uncached = [await top(p, cache_prompt=False) for p in prompts]
    assert max(gap(a, b) for a, b in zip(fresh, uncached, strict=True)) == 0.0
