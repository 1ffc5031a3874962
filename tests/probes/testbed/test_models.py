"""Each fault on real models (SmolLM2-135M, Gemma 3 270M) through the harness.

One testbed for the module: `honest` and `faulty` share process 0, `honest-2` is process 1.
Every test sets the fault it needs on `faulty`, which is cleared afterwards. Requests are short
(one token where one token shows the fault) and seeded, so outcomes are fixed, not lucky.
"""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from probes.testbed.backends import (
    ModelError,
    ModelFiles,
    _sha256,
    _tensor_layout,
    quantize,
    quantize_tensors,
    quantized_cache_dir,
)
from probes.testbed.harness import EndpointSpec, Testbed, TestbedError

pytestmark = pytest.mark.engine

ONE_TOKEN = {
    "messages": [{"role": "user", "content": "x"}],
    "max_tokens": 1,
    "temperature": 0,
    "logprobs": True,
    "top_logprobs": 20,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]
WEATHER_ASK = {
    "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}],
    "tools": TOOLS[:1],
    "tool_choice": "required",
    "max_tokens": 40,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    specs = [EndpointSpec("honest"), EndpointSpec("faulty"), EndpointSpec("honest-2", process=1)]
    with Testbed(specs) as tb:
        yield tb


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=300) as client:
        yield client


@pytest.fixture
def faulty(testbed: Testbed) -> Iterator[str]:
    yield "faulty"
    testbed.clear_fault("faulty")


def chat(http: httpx.Client, tb: Testbed, name: str, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post(f"{tb.base_url(name)}/chat/completions", json={"model": "smollm2", **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def complete(http: httpx.Client, tb: Testbed, name: str, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post(f"{tb.base_url(name)}/completions", json={"model": "smollm2", **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def top(response: dict[str, Any]) -> list[tuple[str, float]]:
    first = response["choices"][0]["logprobs"]["content"][0]
    return [(t["token"], t["logprob"]) for t in first["top_logprobs"]]


def test_honest_replicas_in_two_processes_agree(testbed: Testbed, http: httpx.Client) -> None:
    a, b = chat(http, testbed, "honest", ONE_TOKEN), chat(http, testbed, "honest-2", ONE_TOKEN)
    assert len(top(a)) == 20
    assert top(a) == top(b)
    assert a["usage"] == b["usage"] and a["model"] == "smollm2"


def test_logit_noise_changes_logprobs_fresh_per_request(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    honest = top(chat(http, testbed, "honest", ONE_TOKEN))
    testbed.set_fault(faulty, {"logit_noise": 0.5, "seed": 1})
    first, second = top(chat(http, testbed, faulty, ONE_TOKEN)), top(chat(http, testbed, faulty, ONE_TOKEN))
    assert first != honest and second != honest and first != second
    assert testbed.counts(faulty) == {"requests": 2, "logit_noise": 2}
    testbed.clear_fault(faulty)
    assert top(chat(http, testbed, faulty, ONE_TOKEN)) == honest  # no noisy state left behind


def test_quantize_makes_another_file_with_other_logprobs(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    source = ModelFiles(quantized_cache_dir()).resolve("smollm2")
    copy = quantize(source, "Q2_K", quantized_cache_dir())
    assert copy != source and copy.is_file() and _sha256(copy) != _sha256(source)
    assert quantize(source, "Q2_K", quantized_cache_dir()) == copy  # cached
    testbed.set_fault(faulty, {"quantize": "Q2_K"})
    assert top(chat(http, testbed, faulty, ONE_TOKEN)) != top(chat(http, testbed, "honest", ONE_TOKEN))
    assert testbed.counts(faulty)["quantize"] == 1


def test_quantize_tensors_changes_only_the_matching_tensors(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    source = ModelFiles(quantized_cache_dir()).resolve("smollm2")
    copy = quantize_tensors(source, "ffn_down", "Q2_K", quantized_cache_dir())
    before, after = _tensor_layout(source), _tensor_layout(copy)
    changed = {name for name in before if before[name] != after[name]}
    assert len(changed) == 30 and all(".ffn_down." in name and after[name][0] == "Q2_K" for name in changed)
    assert quantize_tensors(source, "ffn_down", "Q2_K", quantized_cache_dir()) == copy  # cached
    with pytest.raises(ModelError, match="no tensor"):
        quantize_tensors(source, "no_such_tensor", "Q2_K", quantized_cache_dir())
    # Review finding: rows of 576 do not fit Q2_K's 256-blocks (llama.cpp falls back to another
    # type), and norms are never quantized: either copy is not the fault asked for.
    for pattern in ("attn_q", "ffn_norm"):
        with pytest.raises(ModelError, match="matching tensors as"):
            quantize_tensors(source, pattern, "Q2_K", quantized_cache_dir())
    testbed.set_fault(faulty, {"quantize_tensors": {"pattern": "ffn_down", "type": "Q2_K"}})
    assert top(chat(http, testbed, faulty, ONE_TOKEN)) != top(chat(http, testbed, "honest", ONE_TOKEN))
    assert testbed.counts(faulty)["quantize_tensors"] == 1


def test_substitute_serves_another_model_under_the_same_name(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    testbed.set_fault(faulty, {"substitute": "gemma3-270m"})
    swapped = chat(http, testbed, faulty, ONE_TOKEN)
    honest = chat(http, testbed, "honest", ONE_TOKEN)
    assert swapped["model"] == "smollm2"
    assert {t for t, _ in top(swapped)[:5]} != {t for t, _ in top(honest)[:5]}
    assert testbed.counts(faulty)["substitute"] == 1


def test_temperature_changes_sampling_but_not_logprobs(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    testbed.set_fault(faulty, {"temperature": 0.05})
    body = {"prompt": "x", "max_tokens": 1, "temperature": 1.0, "logprobs": 5}
    honest = [complete(http, testbed, "honest", {**body, "seed": s}) for s in range(8)]
    cooled = [complete(http, testbed, faulty, {**body, "seed": s}) for s in range(8)]
    tops = [r["choices"][0]["logprobs"]["top_logprobs"][0] for r in honest + cooled]
    assert all(t == tops[0] for t in tops)  # raw logprobs, as vLLM reports them
    best = max(tops[0], key=tops[0].get)
    assert sum(c["choices"][0]["text"] == best for c in cooled) >= 7
    assert len({h["choices"][0]["text"] for h in honest}) >= 3
    assert testbed.counts(faulty) == {"requests": 8, "temperature": 8}


def _valid_call(call: dict[str, Any], tools: list[dict[str, Any]]) -> bool:
    """The call names a declared tool and its arguments satisfy that tool's (simple) schema."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    schema = schemas.get(call["function"]["name"])
    try:
        args = json.loads(call["function"]["arguments"])
    except ValueError:
        return False
    if schema is None or not isinstance(args, dict) or not set(schema["required"]) <= set(args):
        return False
    types = {"string": str, "integer": int}
    for key, value in args.items():
        prop = schema["properties"].get(key)
        if prop is None or not isinstance(value, types[prop["type"]]) or isinstance(value, bool):
            return False
        if "enum" in prop and value not in prop["enum"]:
            return False
    return True


def test_honest_forced_tool_calls_validate(testbed: Testbed, http: httpx.Client) -> None:
    asks = [
        WEATHER_ASK,
        {**WEATHER_ASK, "tools": TOOLS, "messages": [{"role": "user", "content": "What is 2 plus 3?"}],
         "tool_choice": {"type": "function", "function": {"name": "add"}}},
    ]
    for ask in asks:
        choice = chat(http, testbed, "honest", ask)["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        calls = choice["message"]["tool_calls"]
        assert calls and all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
        assert all(_valid_call(c, ask["tools"]) for c in calls), calls
    assert calls[0]["function"]["name"] == "add"


def test_tool_corruption_at_rate_one_breaks_every_call(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    # Each kind's exact damage is unit-tested (test_faults.py); here: end to end, every call broken.
    testbed.set_fault(faulty, {"tool_corruption": {"rate": 1.0}, "seed": 4})
    seen = set()
    for _ in range(3):
        choice = chat(http, testbed, faulty, WEATHER_ASK)["choices"][0]
        calls = choice["message"].get("tool_calls")
        if calls:
            assert choice["finish_reason"] == "tool_calls" and not _valid_call(calls[0], TOOLS[:1])
            seen.add("call")
        else:  # leaked into content
            assert choice["finish_reason"] == "stop" and "get_weather" in choice["message"]["content"]
            seen.add("leak")
    assert seen == {"call", "leak"}  # seed 4 draws both shapes
    assert testbed.counts(faulty) == {"requests": 3, "tool_corruption": 3}


def test_truncate_prompt_changes_usage_and_output(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    body = {"prompt": "Alice has three apples and Bob has two pears. Together they", "max_tokens": 1,
            "temperature": 0, "logprobs": 5}
    honest = complete(http, testbed, "honest", body)
    full = honest["usage"]["prompt_tokens"]
    testbed.set_fault(faulty, {"truncate_prompt": {"tokens": 4, "keep": "tail"}})
    cut = complete(http, testbed, faulty, body)
    assert full > 8 and cut["usage"]["prompt_tokens"] == 4
    assert cut["choices"][0]["logprobs"]["top_logprobs"] != honest["choices"][0]["logprobs"]["top_logprobs"]
    testbed.set_fault(faulty, {"truncate_prompt": {"tokens": 4, "report": "original"}})
    hidden = complete(http, testbed, faulty, body)
    assert hidden["usage"]["prompt_tokens"] == full  # the cut is invisible in usage
    assert hidden["choices"][0]["logprobs"]["top_logprobs"] != honest["choices"][0]["logprobs"]["top_logprobs"]
    assert testbed.counts(faulty)["truncate_prompt"] == 1


def test_loop_repeats_until_max_tokens(testbed: Testbed, http: httpx.Client, faulty: str) -> None:
    testbed.set_fault(faulty, {"loop": {"after_tokens": 4, "rate": 1.0, "ngram": 2}})
    body = {"prompt": "The weather today is", "max_tokens": 14, "temperature": 0, "logprobs": 0}
    out = complete(http, testbed, faulty, body)
    choice = out["choices"][0]
    tokens = choice["logprobs"]["tokens"]
    assert choice["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 14 == len(tokens)
    gram = tokens[2:4]
    assert tokens[4:] == gram * 5 and choice["text"].endswith("".join(gram) * 5)
    assert testbed.counts(faulty) == {"requests": 1, "loop": 1}


def test_control_api_rejects_a_bad_spec(testbed: Testbed, http: httpx.Client) -> None:
    r = http.put(f"{testbed.control_url('faulty')}/endpoints/faulty/fault", json={"quantize": "Q1_X"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("fault.quantize")
    with pytest.raises(TestbedError, match="400.*unknown model"):
        testbed.set_fault("faulty", {"substitute": "no-such-model"})
    assert testbed.describe("faulty")["fault"] == {}
