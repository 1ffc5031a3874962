"""Anthropic Messages answers -> OpenAI chat shape: a Message -> a chat completion, and the Messages
SSE events -> chat chunks.

stop_reason -> finish_reason: end_turn, stop_sequence, pause_turn -> stop; max_tokens -> length;
tool_use -> tool_calls; refusal -> content_filter.
Usage: prompt_tokens = input_tokens + cache_read_input_tokens + cache_creation_input_tokens (Anthropic's
input_tokens leaves the cached part out), prompt_tokens_details.cached_tokens = cache_read_input_tokens
(what KV affinity and the cached price read), completion_tokens = output_tokens; the two cache fields
are kept in the usage object as Anthropic named them.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import orjson

from kernel.errors import ProviderServerError, ProviderStreamError
from kernel.values import Usage, is_count, token_count
from providers.base import ParsedBody, ParsedChunk, Target

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


PROMPT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def usage_of(usage: Any) -> Usage | None:
    """Anthropic usage as the gateway counts it: none without an output count (the accountant
    estimates it all); where its prompt fields add up to no tokens, the output's count only
    (`Usage.prompt_reported`), never a free prompt."""
    if not isinstance(usage, dict) or not is_count(usage.get("output_tokens")):
        return None
    if token_count(usage.get("output_tokens")) == 0 and not prompt_counted(usage):
        return None  # all zeros count nothing: estimated, never free
    counted = Usage.from_openai(chat_usage(usage))
    assert counted is not None  # chat_usage's dict always counts the output
    return replace(counted, prompt_reported=prompt_counted(usage))


def prompt_counted(usage: dict[str, Any]) -> bool:
    return sum(token_count(usage.get(k)) for k in PROMPT_FIELDS) > 0


def prompt_usage_of(usage: dict[str, Any]) -> Usage | None:
    """message_start's count of the prompt, if it counted one (the output is counted later)."""
    if not prompt_counted(usage):
        return None
    counted = Usage.from_openai(chat_usage(usage))
    return replace(counted, completion_tokens=0) if counted else None


def merge_counts(into: dict[str, Any], usage: Any, *, start: bool = False) -> None:
    """An event's usage into its stream's: a null says nothing, message_start's output count is a
    placeholder (message_delta has the count), and a later 0 does not erase a prompt counted."""
    for name, value in counts(usage).items():
        if start and name == "output_tokens":
            continue
        if name in PROMPT_FIELDS and token_count(value) == 0 and token_count(into.get(name)) > 0:
            continue
        into[name] = value


def chat_usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    fresh, read, created = (token_count(usage.get(k)) for k in PROMPT_FIELDS)
    output = token_count(usage.get("output_tokens"))
    prompt = fresh + read + created
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": created,
    }


def _invalid(target: Target, what: str) -> ProviderServerError:
    return ProviderServerError(f"upstream {target.endpoint_id} answered with {what}", endpoint=target.endpoint_id)


def parse_message(target: Target, body: bytes) -> ParsedBody:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _invalid(target, "invalid JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise _invalid(target, "a body that is not a Message")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append({"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}})
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        reply["tool_calls"] = calls
    usage = chat_usage(message.get("usage"))
    counted = usage_of(message.get("usage"))
    chat = {
        "id": f"chatcmpl-{message.get('id', '')}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": target.public_model,
        "choices": [
            {"index": 0, "message": reply, "logprobs": None, "finish_reason": FINISH_REASONS.get(message.get("stop_reason") or "", "stop")}
        ],
        "usage": usage,
    }
    return ParsedBody(orjson.dumps(chat), counted)


class AnthropicStreamTranslator:
    """One per stream: Anthropic's events in, chat chunks out. Usage is counted from message_start
    (input) and message_delta (output) and sent as the last chunk when the client asked for it."""

    def __init__(self, target: Target, *, include_usage: bool) -> None:
        self._target = target
        self._include_usage = include_usage
        self._id = "chatcmpl-"
        self._created = int(time.time())
        self._usage: dict[str, Any] = {}
        self._tools: dict[int, int] = {}  # content block index -> tool call index

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._target.public_model,
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return orjson.dumps(chunk)

    def _fail(self, what: str) -> ProviderStreamError:
        return ProviderStreamError(f"upstream {self._target.endpoint_id}: {what}", endpoint=self._target.endpoint_id)

    def feed(self, event: str | None, data: bytes) -> ParsedChunk:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self._fail("an invalid stream event") from None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "message_start":
            message = obj.get("message")
            message = message if isinstance(message, dict) else {}
            self._id = f"chatcmpl-{message.get('id', '')}"
            merge_counts(self._usage, message.get("usage"), start=True)
            return ParsedChunk([self._chunk({"role": "assistant", "content": ""})], prompt_usage=prompt_usage_of(self._usage))
        if kind == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                position = self._tools[obj.get("index", 0)] = len(self._tools)
                call = {"index": position, "id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": ""}}
                return ParsedChunk([self._chunk({"tool_calls": [call]})])
            if block.get("type") == "text" and block.get("text"):
                return ParsedChunk([self._chunk({"content": block["text"]})])
            return ParsedChunk()
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta":
                return ParsedChunk([self._chunk({"content": delta.get("text", "")})])
            if delta.get("type") == "input_json_delta" and obj.get("index", 0) in self._tools:
                call = {"index": self._tools[obj.get("index", 0)], "function": {"arguments": delta.get("partial_json", "")}}
                return ParsedChunk([self._chunk({"tool_calls": [call]})])
            return ParsedChunk()  # thinking and signature deltas have no chat form
        if kind == "message_delta":
            merge_counts(self._usage, obj.get("usage"))
            reason = (obj.get("delta") or {}).get("stop_reason")
            return ParsedChunk([self._chunk({}, FINISH_REASONS.get(reason or "", "stop"))])
        if kind == "message_stop":
            usage = chat_usage(self._usage)
            payloads = [orjson.dumps({**orjson.loads(self._chunk(None)), "usage": usage})] if self._include_usage else []
            return ParsedChunk(payloads, usage_of(self._usage), done=True)
        if kind == "error":
            error = obj.get("error") or {}
            raise self._fail(f"{error.get('type', 'error')}: {error.get('message', '')}"[:500])
        return ParsedChunk()  # ping, content_block_stop, and event types added later


def counts(usage: Any) -> dict[str, Any]:
    """An event's usage fields that say something: a null is no count (it must not hide one)."""
    return {k: v for k, v in usage.items() if v is not None} if isinstance(usage, dict) else {}
