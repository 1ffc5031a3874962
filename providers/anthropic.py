"""Adapter for Anthropic's Messages API as an upstream (`kind: anthropic`, base_url
``https://<host>/v1``): the gateway's chat request becomes a Messages request; the answer, its SSE
events and its errors come back in OpenAI shape (`providers.anthropic_answer`).

Request mapping (chat -> Messages):
  system / developer messages          -> `system` (joined by blank lines)
  text and image_url parts             -> text and image blocks (data: URLs as base64, others as url)
  assistant tool_calls                 -> tool_use blocks (arguments parsed; text that is not JSON is an empty input)
  tool messages                        -> tool_result blocks in the user turn that follows the calls
  max_tokens / max_completion_tokens   -> max_tokens (required there: DEFAULT_MAX_TOKENS when unset)
  stop                                 -> stop_sequences
  temperature (0-2)                    -> temperature, clamped to Anthropic's 0-1
  top_p, top_k                         -> the same
  tools / tool_choice                  -> input_schema / auto, any, tool, none
  parallel_tool_calls: false           -> tool_choice.disable_parallel_tool_use
  user                                 -> metadata.user_id
  response_format json_schema          -> output_config.format (structured outputs)
Refused with a 400 (no Messages equivalent): `response_format` json_object, `logprobs`, audio.
Prompt counting (`PromptCounting`, for /v1/messages/count_tokens): the same Messages body, less
what `POST /v1/messages/count_tokens` does not take, is counted there by Claude's own tokenizer.
Deployments of this kind should declare ``capabilities: {logprobs: false, native_n: false}``.
With ``native: [messages]`` a deployment takes `/v1/messages` requests as is (`NativeAdapter`,
`providers.anthropic_native`): no translation either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kernel.errors import ProviderError, ProviderRejected, ProviderServerError
from kernel.values import Operation
from providers import anthropic_native
from providers.anthropic_answer import AnthropicStreamTranslator, parse_message
from providers.base import ParsedBody, Target, UpstreamRequest
from providers.openai_compat import map_http_error

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
# What POST /v1/messages/count_tokens takes of a Messages body (it refuses max_tokens, stream, ...).
COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice")


def _refuse(target: Target, param: str, message: str) -> ProviderRejected:
    return ProviderRejected(f"{message} (the deployment on {target.endpoint_id} speaks Anthropic's Messages API)", param=param, endpoint=target.endpoint_id)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _image(part: dict[str, Any]) -> dict[str, Any]:
    image = part.get("image_url") or {}
    url = image.get("url", "") if isinstance(image, dict) else str(image)
    if url.startswith("data:") and ";base64," in url:
        media, _, data = url[5:].partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(target: Target, content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for j, part in enumerate(content if isinstance(content, list) else ()):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            blocks.append(_image(part))
        else:
            raise _refuse(target, f"{where}.content[{j}].type", f"Content parts of type '{kind}' are not supported")
    return blocks


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = orjson.loads(raw or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _messages(target: Target, messages: list[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:  # tool results and the user's next words share one turn
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        role = message.get("role")
        where = f"messages[{i}]"
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "user":
            add("user", _blocks(target, message.get("content"), where))
        elif role == "assistant":
            blocks = _blocks(target, message.get("content"), where)
            for call in message.get("tool_calls") or ():
                fn = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _arguments(fn.get("arguments"))})
            add("assistant", blocks)
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": _text(message.get("content"))}
            add("user", [result])
        else:
            raise _refuse(target, f"{where}.role", f"Messages of role '{role}' are not supported")
    return system, out


def _tool_choice(body: dict[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        out: dict[str, Any] = {"type": "tool", "name": name}
    elif choice in ("auto", "required", "none"):
        out = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    else:
        out = {"type": "auto"} if body.get("parallel_tool_calls") is False else {}
    if body.get("parallel_tool_calls") is False and out.get("type") != "none":
        out["disable_parallel_tool_use"] = True
    return out or None


def messages_body(target: Target, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    for name in ("logprobs", "top_logprobs", "audio"):
        if body.get(name):
            raise _refuse(target, name, f"'{name}' is not supported")
    fmt = body.get("response_format")
    schema = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {"type": "object"}
    elif isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise _refuse(target, "response_format", f"'response_format' {fmt.get('type')} is not supported; use json_schema")
    system, messages = _messages(target, body.get("messages") or [])
    out: dict[str, Any] = {
        "model": target.upstream_model,
        "messages": messages,
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS,
    }
    if system:
        out["system"] = "\n\n".join(system)
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("temperature") is not None:
        out["temperature"] = min(float(body["temperature"]), 1.0)
    for name in ("top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    tools = body.get("tools")
    if tools:
        out["tools"] = [
            {
                "name": t["function"]["name"],
                **({"description": t["function"]["description"]} if t["function"].get("description") else {}),
                "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}},
            }
            for t in tools
        ]
        choice = _tool_choice(body)
        if choice:
            out["tool_choice"] = choice
    if isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}
    if schema is not None:
        out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    if stream:
        out["stream"] = True
    return out


def _headers(target: Target, stream: bool) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        "anthropic-version": API_VERSION,
    }
    if target.api_key:
        headers["x-api-key"] = target.api_key
    if target.extra_headers:
        headers.update(target.extra_headers)
    return headers


class AnthropicAdapter:
    native_apis = frozenset({anthropic_native.MESSAGES})

    def takes_natively(self, api: str, body: Mapping[str, Any]) -> bool:
        return True

    def build_request(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> UpstreamRequest:
        if op != "chat":
            raise _refuse(target, "model", f"The {op} endpoint is not supported")
        payload = orjson.dumps(messages_body(target, body, stream))
        return UpstreamRequest("POST", target.base_url + "/messages", _headers(target, stream), payload, stream)

    def count_step(
        self, target: Target, body: dict[str, Any], step: int, answer: bytes | None
    ) -> UpstreamRequest | int:
        if step == 0:
            full = messages_body(target, body, False)
            payload = orjson.dumps({k: full[k] for k in COUNT_FIELDS if k in full})
            return UpstreamRequest("POST", target.base_url + "/messages/count_tokens", _headers(target, False), payload)
        try:
            count = orjson.loads(answer or b"").get("input_tokens")
        except (orjson.JSONDecodeError, AttributeError):
            count = None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ProviderServerError(
                f"upstream {target.endpoint_id} answered a count without `input_tokens`", endpoint=target.endpoint_id
            )
        return count

    def parse_response(
        self, target: Target, op: Operation, body: bytes, request: Mapping[str, Any] | None = None
    ) -> ParsedBody:
        return parse_message(target, body)

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> AnthropicStreamTranslator:
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return AnthropicStreamTranslator(target, include_usage=wants_usage)

    def map_error(self, target: Target, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        # Anthropic's {"type": "error", "error": {"type", "message"}} reads as OpenAI's does; 529
        # (overloaded) is a retryable 5xx with its retry-after.
        return map_http_error(target.endpoint_id, status, headers, body)

    def build_native(
        self, target: Target, api: str, body: Mapping[str, Any], stream: bool, headers: Mapping[str, str]
    ) -> UpstreamRequest:
        return anthropic_native.build_native(target, body, stream, headers, _headers(target, stream))

    def parse_native(self, target: Target, api: str, body: bytes) -> ParsedBody:
        return anthropic_native.parse_native(target, body)

    def native_stream(self, target: Target, api: str, *, prompt_hint: int = 0) -> anthropic_native.NativeStream:
        return anthropic_native.NativeStream(target)
