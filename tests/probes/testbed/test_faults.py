import json

import numpy as np
import pytest

from probes.testbed.faults import (
    HONEST,
    FaultSpecError,
    TruncatePrompt,
    corrupt_tool_calls,
    draw,
    drawn,
    logit_noise,
    loop_tokens,
    parse_fault,
    reported_prompt_tokens,
    resolve_partial,
    served_temperature,
    truncate_tokens,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city", "days"],
            },
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}}


def test_empty_spec_is_honest() -> None:
    assert parse_fault({}) == HONEST
    assert HONEST.is_honest and HONEST.active() == ()


def test_full_spec_parses_and_round_trips() -> None:
    raw = {
        "substitute": "gemma3-270m",
        "quantize": "Q2_K",
        "logit_noise": 0.5,
        "temperature": 0.7,
        "partial": {"share": 0.5, "fault": {"quantize": "Q2_K"}},
        "tool_corruption": {"rate": 0.2, "kinds": ["bad_json", "leak_to_content"]},
        "truncate_prompt": {"tokens": 64, "keep": "tail", "report": "original"},
        "loop": {"after_tokens": 5, "rate": 0.1},
        "seed": 3,
    }
    spec = parse_fault(raw)
    assert spec.tool_corruption is not None and spec.tool_corruption.kinds == ("bad_json", "leak_to_content")
    assert parse_fault(spec.as_json()) == spec
    assert "seed" not in spec.active() and "loop" in spec.active()


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"logit_nois": 1}, "fault.logit_nois: unknown key"),
        ({"logit_noise": -1}, "fault.logit_noise"),
        ({"logit_noise": "big"}, "fault.logit_noise"),
        ({"quantize": "Q9_X"}, "fault.quantize"),
        ({"quantize_tensors": {"pattern": "ffn_down", "type": "Q2_K_M"}}, "fault.quantize_tensors.type"),
        ({"quantize_tensors": {"pattern": "ffn_(down", "type": "Q2_K"}}, "fault.quantize_tensors.pattern"),
        ({"quantize_tensors": {"pattern": "", "type": "Q2_K"}}, "fault.quantize_tensors.pattern"),
        ({"quantize_tensors": {"type": "Q2_K"}}, "fault.quantize_tensors.pattern"),
        ({"partial": {"share": 1.5, "fault": {}}}, "fault.partial.share"),
        ({"partial": {"share": 0.5, "fault": {"nope": 1}}}, "fault.partial.fault.nope"),
        ({"tool_corruption": {"kinds": ["garbled"]}}, "fault.tool_corruption.kinds.0"),
        ({"tool_corruption": {"kinds": []}}, "fault.tool_corruption.kinds"),
        ({"truncate_prompt": {"tokens": 0}}, "fault.truncate_prompt.tokens"),
        ({"truncate_prompt": {"tokens": 8, "keep": "middle"}}, "fault.truncate_prompt.keep"),
        ({"loop": {"rate": 2}}, "fault.loop.rate"),
        ({"temperature_scale": 0}, "fault.temperature_scale"),
        ([1, 2], "fault: must be a JSON object"),
    ],
)
def test_bad_spec_is_one_clear_line(raw: object, where: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        parse_fault(raw)
    assert str(info.value).startswith(where)
    assert "\n" not in str(info.value)


def test_partial_share_is_drawn_at_its_rate() -> None:
    spec = parse_fault({"logit_noise": 0.1, "partial": {"share": 0.3, "fault": {"quantize": "Q2_K", "logit_noise": 0.9}}})
    rng = np.random.default_rng(7)
    served = [resolve_partial(spec, rng) for _ in range(2000)]
    hits = [s for s, inside in served if inside]
    assert 0.25 < len(hits) / 2000 < 0.35
    assert all(s.quantize == "Q2_K" and s.logit_noise == 0.9 and s.partial is None for s in hits)
    assert all(s.quantize is None and s.logit_noise == 0.1 for s, inside in served if not inside)


def test_draws_are_reproducible_from_the_seed() -> None:
    spec = parse_fault({"tool_corruption": {"rate": 0.5}, "loop": {"rate": 0.5}, "seed": 1})
    first = [draw(spec, np.random.default_rng(spec.seed)) for _ in range(20)]
    again = [draw(spec, np.random.default_rng(spec.seed)) for _ in range(20)]
    assert first == again
    rng = np.random.default_rng(2)
    many = [draw(spec, rng) for _ in range(400)]
    assert 0.4 < sum(d.loop for d in many) / 400 < 0.6
    assert {d.corruption for d in many} >= {None, "bad_json", "leak_to_content"}


def test_logit_noise_has_the_asked_sigma_and_differs_per_draw() -> None:
    rng = np.random.default_rng(0)
    a, b = logit_noise(50_000, 0.5, rng), logit_noise(50_000, 0.5, rng)
    assert a.dtype == np.float32
    assert abs(float(a.std()) - 0.5) < 0.01 and abs(float(a.mean())) < 0.01
    assert not np.allclose(a, b)


def test_served_temperature() -> None:
    assert served_temperature(1.0, HONEST) == 1.0
    assert served_temperature(None, HONEST) == 1.0  # OpenAI's default
    assert served_temperature(1.0, parse_fault({"temperature": 0.7})) == 0.7
    assert served_temperature(0.0, parse_fault({"temperature": 0.7})) == 0.7
    assert served_temperature(0.5, parse_fault({"temperature_scale": 2})) == 1.0


def test_drawn_rates() -> None:
    rng = np.random.default_rng(0)
    assert all(drawn(1.0, rng) for _ in range(100))
    assert not any(drawn(0.0, rng) for _ in range(100))


def test_truncation_keeps_head_or_tail_and_reports_either_count() -> None:
    tokens = list(range(10))
    assert truncate_tokens(tokens, TruncatePrompt(tokens=4)) == [0, 1, 2, 3]
    assert truncate_tokens(tokens, TruncatePrompt(tokens=4, keep="tail")) == [6, 7, 8, 9]
    assert truncate_tokens(tokens, TruncatePrompt(tokens=40)) == tokens
    assert reported_prompt_tokens(10, 4, TruncatePrompt(tokens=4)) == 4
    assert reported_prompt_tokens(10, 4, TruncatePrompt(tokens=4, report="original")) == 10
    assert reported_prompt_tokens(10, 10, None) == 10


def test_loop_repeats_the_last_ngram_up_to_max_tokens() -> None:
    assert loop_tokens([1, 2, 3, 4, 5], after=4, max_tokens=10, ngram=2) == [1, 2, 3, 4, 3, 4, 3, 4, 3, 4]
    assert loop_tokens([1, 2], after=4, max_tokens=5, ngram=3) == [1, 2, 1, 2, 1]  # stopped early: loops anyway
    assert loop_tokens([1, 2, 3], after=8, max_tokens=2, ngram=2) == [1, 2]
    assert loop_tokens([], after=4, max_tokens=5, ngram=2) == []


def _args(call: dict) -> object:
    return json.loads(call["function"]["arguments"])


def test_bad_json_does_not_parse() -> None:
    calls, content, finish = corrupt_tool_calls([CALL], TOOLS, "bad_json", np.random.default_rng(0))
    with pytest.raises(ValueError):
        json.loads(calls[0]["function"]["arguments"])
    assert content is None and finish == "tool_calls"
    assert CALL["function"]["arguments"] == '{"city": "Paris", "days": 3}'  # the input is untouched


def test_unknown_name_is_not_a_declared_tool() -> None:
    tools = TOOLS + [{"type": "function", "function": {"name": "get_weather_v2", "parameters": {}}}]
    calls, _, _ = corrupt_tool_calls([CALL], tools, "unknown_name", np.random.default_rng(0))
    assert calls[0]["function"]["name"] not in {"get_weather", "get_weather_v2"}


def test_missing_arg_drops_a_required_argument() -> None:
    for seed in range(5):
        calls, _, _ = corrupt_tool_calls([CALL], TOOLS, "missing_arg", np.random.default_rng(seed))
        args = _args(calls[0])
        assert isinstance(args, dict) and len(args) == 1 and set(args) < {"city", "days"}


def test_retyped_arg_changes_a_json_type() -> None:
    for seed in range(5):
        calls, _, _ = corrupt_tool_calls([CALL], TOOLS, "retyped_arg", np.random.default_rng(seed))
        args = _args(calls[0])
        assert isinstance(args, dict)
        assert not isinstance(args["city"], str) or not isinstance(args["days"], int)


def test_leak_to_content_moves_the_call_into_text() -> None:
    calls, content, finish = corrupt_tool_calls([CALL], TOOLS, "leak_to_content", np.random.default_rng(0))
    assert calls == [] and finish == "stop"
    assert content is not None and "get_weather" in content and "Paris" in content


def test_an_argument_kind_without_arguments_still_breaks_the_call() -> None:
    empty = {**CALL, "function": {"name": "get_weather", "arguments": "{}"}}
    calls, _, _ = corrupt_tool_calls([empty], TOOLS, "missing_arg", np.random.default_rng(0))
    assert calls[0]["function"]["name"] != "get_weather"
