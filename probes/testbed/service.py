"""An endpoint's requests end to end: which model serves it, the chat prompt, the OpenAI response.

Sync and blocking (llama.cpp); the server calls it from a worker thread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from probes.testbed.backends import LoadedModel, ModelFiles, ModelPool
from probes.testbed.faults import Draws, FaultSpec, corrupt_tool_calls
from probes.testbed.generation import Generated, chat_logprobs, completion_logprobs, generate
from probes.testbed.templates import chat_template
from probes.testbed.tools import (
    ToolRequestError,
    chosen_tools,
    history_as_text,
    parse_tool_calls,
    tool_grammar,
    tool_system_prompt,
)
from probes.testbed.wire import BadRequest, ChatRequest, CompletionRequest


class Service:
    def __init__(self, files: ModelFiles, pool: ModelPool) -> None:
        self._files = files
        self._pool = pool
        self._formatters: dict[Path, Any] = {}

    def model_path(self, base: str, spec: FaultSpec) -> Path:
        path = self._files.resolve(spec.substitute or base)
        if spec.quantize:
            path = self._files.quantized(path, spec.quantize)
        if spec.quantize_tensors is not None:
            path = self._files.quantized_tensors(path, spec.quantize_tensors.pattern, spec.quantize_tensors.type)
        return path

    def prepare(self, base: str, spec: FaultSpec) -> None:
        """Resolve, quantize and load every model `spec` may serve, so its first request is not slow
        and a bad model name fails here (raises `ModelError`)."""
        self._pool.get(self.model_path(base, spec.model_copy(update={"partial": None})))
        if spec.partial is not None:
            inner = spec.partial.fault
            merged = spec.model_copy(update={"partial": None, **{k: getattr(inner, k) for k in inner.model_fields_set}})
            self.prepare(base, merged)

    def _model(self, base: str, spec: FaultSpec) -> tuple[LoadedModel, set[str]]:
        touched = {k for k in ("substitute", "quantize", "quantize_tensors") if getattr(spec, k)}
        return self._pool.get(self.model_path(base, spec)), touched

    def chat(self, base: str, served_name: str, req: ChatRequest, draws: Draws) -> tuple[dict[str, Any], set[str]]:
        model, touched = self._model(base, draws.spec)
        try:
            tools, mode = chosen_tools(req.tools, req.tool_choice)
        except ToolRequestError as exc:
            raise BadRequest(str(exc), "tool_choice") from None
        messages = list(req.messages)
        if tools:
            messages.insert(0, {"role": "system", "content": tool_system_prompt(tools, mode)})
        prompt = self._chat_tokens(model, history_as_text(_developer_as_system(messages)))
        grammar = tool_grammar(tools, mode, req.parallel_tool_calls)
        out = generate(model, prompt, req.sampling, draws, grammar)
        touched |= out.touched
        message: dict[str, Any] = {"role": "assistant", "content": out.text}
        finish = out.finish_reason
        calls = parse_tool_calls(out.text, _call_id) if grammar is not None else None
        if calls:
            message, finish = {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
            if draws.corruption is not None:
                broken, content, finish = corrupt_tool_calls(calls, tools, draws.corruption, _rng(draws))
                message = {"role": "assistant", "content": content}
                if broken:
                    message["tool_calls"] = broken
                touched.add("tool_corruption")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if out.entries is not None and req.sampling.top_logprobs is not None:
            choice["logprobs"] = chat_logprobs(out.entries, req.sampling.top_logprobs)
        return _response("chat.completion", "chatcmpl", served_name, choice, out), touched

    def completion(
        self, base: str, served_name: str, req: CompletionRequest, draws: Draws
    ) -> tuple[dict[str, Any], set[str]]:
        model, touched = self._model(base, draws.spec)
        prompt = model.llm.tokenize(req.prompt.encode(), add_bos=True, special=True)
        out = generate(model, prompt, req.sampling, draws)
        touched |= out.touched
        choice: dict[str, Any] = {"index": 0, "text": out.text, "finish_reason": out.finish_reason, "logprobs": None}
        if out.entries is not None and req.sampling.top_logprobs is not None:
            choice["logprobs"] = completion_logprobs(out.entries, req.sampling.top_logprobs)
        return _response("text_completion", "cmpl", served_name, choice, out), touched

    def _chat_tokens(self, model: LoadedModel, messages: Sequence[Mapping[str, str]]) -> list[int]:
        formatter = self._formatters.get(model.path)
        if formatter is None:
            formatter = self._formatters[model.path] = _formatter(model.llm)
        try:
            rendered = formatter(messages=list(messages))
        except Exception as exc:  # the template's own raise_exception and Jinja errors
            raise BadRequest(f"the chat template rejected these messages: {exc}", "messages") from None
        return list(model.llm.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True))


def _formatter(llm: Any) -> Any:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    eos, bos = llm.token_eos(), llm.token_bos()
    return Jinja2ChatFormatter(
        template=chat_template(llm.metadata),
        eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
        stop_token_ids=[eos],
    )


def _developer_as_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "role": "system"} if m["role"] == "developer" else m for m in messages]


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _rng(draws: Draws) -> np.random.Generator:
    return np.random.default_rng(draws.noise_seed)


def _response(obj: str, prefix: str, model: str, choice: dict[str, Any], out: Generated) -> dict[str, Any]:
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "total_tokens": out.prompt_tokens + out.completion_tokens,
        },
    }
