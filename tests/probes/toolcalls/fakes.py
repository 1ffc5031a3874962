"""A fake `ProbeClient` that answers the tool-call suite like an ideal honest endpoint, optionally
corrupting a share of its calls the way the testbed does (`probes.testbed.faults`). Also used
by `bench/toolcall_power.py`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from probes.budget import BudgetExhausted
from probes.client import ProbeUnavailable
from probes.testbed.faults import TOOL_CORRUPTION_KINDS, corrupt_tool_calls

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def _value(schema: Mapping[str, Any], name: str) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _value(props[k], k) for k in schema.get("required", props)}
    return {"string": f"{name}-x", "integer": 1, "number": 2.5, "boolean": True, "array": []}.get(kind, name)


def honest_answer(body: dict[str, Any]) -> dict[str, Any]:
    """Calls what the prompt spells out (the suite's expected calls are recovered from the case
    by the caller), else the first allowed tool with schema-valid arguments; text for "none"."""
    choice = body.get("tool_choice", "auto")
    expected = body.get("_expected")
    if choice == "none" or expected is False:
        return text_response("Hello.")
    tools = body["tools"]
    if isinstance(expected, list):
        calls = [(c["name"], c["arguments"]) for c in expected]
    else:
        fn = tools[0]["function"]
        if isinstance(choice, dict):
            fn = next(t["function"] for t in tools if t["function"]["name"] == choice["function"]["name"])
        calls = [(fn["name"], _value(fn["parameters"], fn["name"]))]
    return call_response(calls)


def text_response(text: str, finish: str = "stop") -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": _usage()}


def call_response(calls: list[tuple[str, Any]], finish: str = "tool_calls") -> dict[str, Any]:
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": _usage()}


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50}


class FakeToolClient:
    """Answers chat requests with `answer`; breaks a `rate` share of responses with calls."""

    def __init__(
        self,
        endpoint_id: str = "fake/ep",
        *,
        answer: Answer = honest_answer,
        rate: float = 0.0,
        kinds: tuple[str, ...] = TOOL_CORRUPTION_KINDS,
        rng: np.random.Generator | None = None,
        fail_every: int = 0,
        budget: int | None = None,
        expectations: Mapping[str, Any] | None = None,
    ) -> None:
        self.endpoint_id = endpoint_id
        self.answer = answer
        self.rate = rate
        self.kinds = kinds
        self.rng = rng or np.random.default_rng(0)
        self.fail_every = fail_every
        self.budget = budget
        # The first user message -> the calls it spells out (or False for "no call"): what an
        # ideal model would read from the prompt.
        self.expectations = dict(expectations or {})
        self.requests = self.tokens = self.errors = 0
        self.corrupted = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.budget is not None and self.requests >= self.budget:
            raise BudgetExhausted(f"{self.endpoint_id}: spent")
        self.requests += 1
        if self.fail_every and self.requests % self.fail_every == 0:
            self.errors += 1
            raise ProbeUnavailable(f"{self.endpoint_id}: 503", status=503)
        prompt = body["messages"][0]["content"]
        resp = self.answer({**body, "_expected": self.expectations.get(prompt)})
        self.tokens += 50
        message = resp["choices"][0]["message"]
        if message.get("tool_calls") and self.rate and self.rng.random() < self.rate:
            kind = self.kinds[int(self.rng.integers(len(self.kinds)))]
            calls, content, finish = corrupt_tool_calls(message["tool_calls"], body["tools"], kind, self.rng)  # type: ignore[arg-type]
            self.corrupted += 1
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            resp = {**resp, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        return resp


def expectations_of(cases: Any) -> dict[str, Any]:
    """Prompt -> expected calls (as JSON-like dicts) or False, for `FakeToolClient`."""
    out: dict[str, Any] = {}
    for case in cases:
        prompt = case.messages[0]["content"]
        if case.tool_choice == "none":
            continue  # answered with text anyway; its prompt may repeat a calling case's
        if not case.expect_call:
            out[prompt] = False
        elif case.expected is not None:
            out[prompt] = [{"name": c.name, "arguments": dict(c.arguments)} for c in case.expected]
    return out


class ScriptedTestbedService:
    """The testbed's model service (`probes.testbed.service.Service`) without a model: it answers
    like an ideal honest model (the suite's expected calls, else schema-valid arguments for the
    chosen tool), and the testbed's own fault draws and corruption transforms do the rest, exactly
    as they do over a real model."""

    def __init__(self, expectations: Mapping[str, Any]) -> None:
        self.expectations = dict(expectations)

    def prepare(self, base: str, spec: Any) -> None:
        return None

    def chat(self, base: str, served: str, req: Any, draws: Any) -> tuple[dict[str, Any], set[str]]:
        tools = [dict(t) for t in req.tools]
        prompt = req.messages[0].get("content")
        choice = req.tool_choice if req.tool_choice is not None else "auto"
        if tools:
            resp = honest_answer({"tools": tools, "tool_choice": choice, "_expected": self.expectations.get(prompt)})
        else:
            resp = text_response("Hello.")
        touched: set[str] = set()
        message = resp["choices"][0]["message"]
        if message.get("tool_calls") and draws.corruption is not None:
            rng = np.random.default_rng(draws.noise_seed)
            calls, content, finish = corrupt_tool_calls(message["tool_calls"], tools, draws.corruption, rng)
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            resp = {**resp, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            touched.add("tool_corruption")
        return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": served, **resp}, touched

    def completion(self, base: str, served: str, req: Any, draws: Any) -> tuple[dict[str, Any], set[str]]:
        raise NotImplementedError("the scripted service answers chat only")
