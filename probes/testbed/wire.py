"""OpenAI request bodies -> validated values, and OpenAI-shaped error JSON.

Only what the testbed serves: non-streaming chat and text completions with n=1, logprobs,
temperature, top_p, seed, max_tokens, stop and tools. Anything else is a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.testbed.tools import ToolRequestError, validate_tools

MAX_TOP_LOGPROBS = 20
_ROLES = ("system", "developer", "user", "assistant", "tool")


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def error_body(message: str, *, kind: str = "invalid_request_error", param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


@dataclass(frozen=True)
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int | None = None  # None: no logprobs
    logit_bias: Mapping[str, float] | None = None


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    sampling: Sampling
    tools: list[Mapping[str, Any]]
    tool_choice: object = None
    parallel_tool_calls: bool = False


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str
    sampling: Sampling


def parse_chat(body: object) -> ChatRequest:
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(_ROLES)}", f"messages[{i}].role")
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise BadRequest("logprobs must be a boolean", "logprobs")
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise BadRequest("top_logprobs needs logprobs: true", "top_logprobs")
    try:
        tools = validate_tools(body.get("tools"))
    except ToolRequestError as exc:
        raise BadRequest(str(exc), "tools") from None
    parallel = body.get("parallel_tool_calls", False)
    if not isinstance(parallel, bool):
        raise BadRequest("parallel_tool_calls must be a boolean", "parallel_tool_calls")
    sampling = _sampling(body, (top or 0) if logprobs else None)
    return ChatRequest(messages, sampling, tools, body.get("tool_choice"), parallel)


def parse_completion(body: object) -> CompletionRequest:
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string", "prompt")
    if body.get("echo"):
        raise BadRequest("echo is not supported", "echo")
    return CompletionRequest(prompt, _sampling(body, _int(body, "logprobs", 0, MAX_TOP_LOGPROBS)))


def _object(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("stream is not supported by the testbed", "stream")
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1", "n")
    return body


def _sampling(body: Mapping[str, Any], top_logprobs: int | None) -> Sampling:
    max_tokens = _int(body, "max_completion_tokens", 1, None)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, None)
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("stop must be a string or a list of up to 4 non-empty strings", "stop")
    bias = body.get("logit_bias")
    if bias is not None and not (
        isinstance(bias, dict) and all(isinstance(v, int | float) and str(k).isdigit() for k, v in bias.items())
    ):
        raise BadRequest("logit_bias must map token ids to numbers", "logit_bias")
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise BadRequest("top_p must be > 0", "top_p")
    return Sampling(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=1.0 if top_p is None else top_p,
        seed=_int(body, "seed", None, None),
        stop=stops,
        top_logprobs=top_logprobs,
        logit_bias=bias,
    )


def _int(body: Mapping[str, Any], key: str, low: int | None, high: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be an integer", key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{key} must be in [{low if low is not None else ''}, {high if high is not None else ''}]", key)
    return value


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadRequest(f"{key} must be a number in [{low}, {high}]", key)
    return float(value)
