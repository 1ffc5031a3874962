"""llama-cpp-python's OpenAI-compatible server, normalised to look like OpenAI.

Its deviations (see DESIGN.md, "Normalising upstreams"), as seen with llama-cpp-python 0.3.36:
- an assistant turn whose ``content`` is null (what the SDK sends back after a tool call) or missing
  gets a 500, so it is sent as an empty string;
- ``max_completion_tokens`` is ignored: it is sent as ``max_tokens`` (the smaller one if both are set);
- a streamed tool call repeats its ``id``, ``type`` and ``function.name`` in every delta, which makes
  the SDK's stream helper concatenate the names; only the first delta of each call keeps them;
- tool calls also carry the deprecated ``function_call`` (non-streamed, its name may end in ":"),
  which is dropped wherever ``tool_calls`` is present, as are null ``role``/``tool_calls`` deltas;
- errors are 500s whose message may hold a Python traceback with file paths: only the message is
  kept, and a request-validation error becomes the 400 it is;
- ``tool_choice: "required"`` fails an assert (500, empty message): with one tool it is sent as
  that tool by name; with several it is a 400 naming ``tool_choice`` (other endpoints may be tried);
- ``n`` is ignored (one choice): the engine endpoints declare ``Capabilities.native_n = False``, and
  dispatch fans out (`gateway.pipeline.fanout`);
- sampling adds top-k 40, min-p 0.05 and a repeat penalty of 1.1 by default, so "temperature 1"
  does not sample the distribution the reported logprobs describe (the fidelity probe demotes it):
  unless the request sets them, they are sent switched off, leaving OpenAI's temperature and top_p.
Still not normalised: ``stream_options.include_usage`` (no usage chunk; no token counts are
invented), and the chatml-function-calling template's own limits (see README, "Local engine").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import ProviderError, ProviderRejected
from providers.base import Operation, Target
from providers.openai_compat import OpenAICompatAdapter, OpenAIStreamTranslator, map_http_error

# FastAPI's RequestValidationError as llama_cpp.server words it ("2 validation errors:").
_VALIDATION = re.compile(r"^\d+ validation errors?\b")
# Where a Python traceback starts: everything from that line on is dropped.
_TRACE_START = re.compile(r'^\s*(Traceback \(most recent call last\)|File ")')
# An absolute file path (POSIX or Windows); not the path part of a URL.
_PATH = re.compile(r"(?<![\w:/.])(?:/[\w.\-]+){2,}/?|\b[A-Za-z]:\\[^\s\"']*")
_MAX_MESSAGE = 500
# llama_cpp.server's extra samplers and their "off" values (its defaults: 40, 0.05, 1.1).
_SAMPLERS_OFF = (("top_k", 0), ("min_p", 0.0), ("repeat_penalty", 1.0))


class LlamaCppAdapter(OpenAICompatAdapter):
    def upstream_body(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        payload = super().upstream_body(target, op, body, stream)
        messages = payload.get("messages")
        if isinstance(messages, list) and any(_lacks_content(m) for m in messages):
            payload["messages"] = [{**m, "content": ""} if _lacks_content(m) else m for m in messages]
        if "max_completion_tokens" in payload:
            limit = payload.pop("max_completion_tokens")
            if limit is not None:
                current = payload.get("max_tokens")
                payload["max_tokens"] = limit if current is None else min(limit, current)
        if payload.get("tool_choice") == "required" and payload.get("tools"):
            payload["tool_choice"] = _required_tool(target, payload["tools"])
        if op != "embeddings":
            for name, off in _SAMPLERS_OFF:
                payload.setdefault(name, off)
        return payload

    def normalise_response(self, obj: dict[str, Any]) -> dict[str, Any]:
        for choice in obj.get("choices") or ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict) and message.get("tool_calls"):
                message.pop("function_call", None)
        return obj

    def map_error(self, target: Target, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        message = sanitise_message(_upstream_message(body))
        if status == 500 and _VALIDATION.match(message):
            # The server's own request validation: the request's fault, reported as the 400 it is.
            return ProviderRejected(message, endpoint=target.endpoint_id, upstream_status=status)
        return map_http_error(target.endpoint_id, status, headers, orjson.dumps({"error": {"message": message}}))



def _required_tool(target: Target, tools: list[Any]) -> dict[str, Any]:
    """tool_choice "required" (the server fails an assert on it): with one tool, that tool by name."""
    if len(tools) == 1 and isinstance(tools[0], dict) and isinstance(tools[0].get("function"), dict):
        return {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    err = ProviderRejected(
        f"Endpoint {target.endpoint_id} (llama.cpp) cannot force a call among several tools: "
        "name the function in 'tool_choice' or use 'auto'.",
        param="tool_choice",
        endpoint=target.endpoint_id,
    )
    err.fallback = True  # another endpoint of the model may support it
    raise err


def _lacks_content(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant" and message.get("content") is None


def _upstream_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        for key in ("message", "detail"):
            if isinstance(err.get(key), str):
                return str(err[key])
        if isinstance(err.get("detail"), list):  # FastAPI's own 422
            return orjson.dumps(err["detail"]).decode()
    return err if isinstance(err, str) else ""


def sanitise_message(text: str) -> str:
    """An upstream error message without its traceback or file paths: one line, at most 500 chars."""
    kept = []
    for line in text.splitlines():
        if _TRACE_START.match(line):
            break
        if line.strip():
            kept.append(_PATH.sub("<path>", line.strip()))
    message = " ".join(kept)
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return message or "no details"


class LlamaCppStreamTranslator(OpenAIStreamTranslator):
    __slots__ = ("_seen_calls",)

    def __init__(self, target: Target, *, strip_usage: bool) -> None:
        super().__init__(target, strip_usage=strip_usage)
        self._seen_calls: set[tuple[int, int]] = set()

    def normalise_chunk(self, obj: dict[str, Any]) -> None:
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if "tool_calls" in delta:
                delta.pop("function_call", None)  # the deprecated twin of tool_calls
            for key in _NULL_DELTA_KEYS:
                if key in delta and delta[key] is None:
                    del delta[key]
            calls = delta.get("tool_calls")
            if not calls:
                continue
            for call in calls:
                key = (choice.get("index", 0), call.get("index", 0))
                if key not in self._seen_calls:
                    self._seen_calls.add(key)
                    continue
                call.pop("id", None)
                call.pop("type", None)
                function = call.get("function")
                if isinstance(function, dict):
                    function.pop("name", None)


# Delta keys OpenAI omits rather than sending as null (the engine sends all of them on every chunk).
_NULL_DELTA_KEYS = ("role", "function_call", "tool_calls")


LlamaCppAdapter.translator_class = LlamaCppStreamTranslator
