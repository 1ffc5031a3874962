"""Chat answers -> Anthropic Messages answers: a whole chat completion -> a Message, and a chat
stream's chunks -> the Messages SSE events.

Stop reasons:  stop -> end_turn (stop_sequence when the upstream names the matched sequence, as vLLM's
`stop_reason` and SGLang's `matched_stop` do), length -> max_tokens, tool_calls / function_call ->
tool_use, content_filter -> refusal.
Usage: input_tokens is the prompt less its cached part (Anthropic's meaning), cache_read_input_tokens the
cached part where the upstream reports it; output_tokens the completion.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

import orjson

from kernel.values import Usage

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use", "content_filter": "refusal"}


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def _tool_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def stop_reason(choice: dict[str, Any], stop_sequences: Iterable[str], has_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat choice's finish."""
    finish = choice.get("finish_reason")
    if has_tools and finish in (None, "stop"):
        return "tool_use", None  # some upstreams end a tool call with "stop"
    if finish == "stop" or finish is None:
        for name in ("stop_reason", "matched_stop"):
            matched = choice.get(name)
            if isinstance(matched, str) and matched in stop_sequences:
                return "stop_sequence", matched
        return "end_turn", None
    return STOP_REASONS.get(finish, "end_turn"), None


def usage_block(usage: Usage | None) -> dict[str, Any]:
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    out: dict[str, Any] = {"input_tokens": usage.prompt_tokens - cached, "output_tokens": usage.completion_tokens}
    if usage.cache_reported:
        out["cache_read_input_tokens"] = cached
        out["cache_creation_input_tokens"] = 0
    return out


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object `input` must be; text that is not a JSON object is kept
    whole under `_unparsed_arguments`, so the client sees what the model wrote."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = orjson.loads(arguments)
    except (orjson.JSONDecodeError, TypeError):
        value = None
    return value if isinstance(value, dict) else {"_unparsed_arguments": arguments}


def reasoning(part: dict[str, Any]) -> str | None:
    """A message's or delta's reasoning text: `reasoning_content` (llama.cpp, DeepSeek, vLLM) or `reasoning`."""
    for name in ("reasoning_content", "reasoning"):
        text = part.get(name)
        if isinstance(text, str) and text:
            return text
    return None


def to_message(
    chat: dict[str, Any],
    *,
    model: str,
    message_id: str,
    stop_sequences: tuple[str, ...],
    thinking: bool = False,
    input_tokens: int = 0,
) -> dict[str, Any]:
    """`input_tokens`: the gateway's count of the prompt, shown where the upstream counted none."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    thought = reasoning(message) if thinking else None
    if thought:
        content.append({"type": "thinking", "thinking": thought, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    for call in calls:
        fn = call.get("function") or {}
        content.append(
            {"type": "tool_use", "id": call.get("id") or _tool_id(), "name": fn.get("name") or "", "input": tool_input(fn.get("arguments"))}
        )
    reason, sequence = stop_reason(choice, stop_sequences, bool(calls))
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage_or_count(Usage.from_openai(chat.get("usage")), input_tokens),
    }


def _usage_or_count(usage: Usage | None, input_tokens: int) -> dict[str, Any]:
    block = usage_block(usage)
    if usage is None or not usage.prompt_reported:
        block["input_tokens"] = input_tokens  # the upstream counted no prompt: the gateway's count
    return block


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessagesStream:
    """One per stream: chat chunk payloads in (`frame`), Messages SSE events out; `end` closes the
    message after the upstream's [DONE]. Content blocks are opened in the order they appear: text,
    then each tool call (one block per call index), each closed when the next opens."""

    def __init__(
        self, *, model: str, message_id: str, input_tokens: int, stop_sequences: tuple[str, ...], thinking: bool = False
    ) -> None:
        self.model = model
        self.thinking = thinking
        self.thinking_block: int | None = None
        self.message_id = message_id
        self.input_tokens = input_tokens  # the gateway's count, until the upstream's usage arrives
        self.stop_sequences = stop_sequences
        self.started = False
        self.block = -1  # the index of the open block, -1 when none is open
        self.next_block = 0
        self.text_block: int | None = None
        self.tool_blocks: dict[int, int] = {}  # chat tool-call index -> block index
        self.finish: dict[str, Any] = {}
        self.usage: Usage | None = None

    def _start(self, out: list[bytes]) -> None:
        self.started = True
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        out.append(_event("message_start", {"type": "message_start", "message": message}))
        out.append(_event("ping", {"type": "ping"}))

    def _open(self, out: list[bytes], block: dict[str, Any]) -> int:
        self._close(out)
        index = self.block = self.next_block
        self.next_block += 1
        out.append(_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        return index

    def _close(self, out: list[bytes]) -> None:
        if self.block >= 0:
            out.append(_event("content_block_stop", {"type": "content_block_stop", "index": self.block}))
            self.block = -1

    def _delta(self, out: list[bytes], index: int, delta: dict[str, Any]) -> None:
        out.append(_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))

    def _text(self, out: list[bytes], text: str) -> None:
        if self.text_block is None or self.text_block != self.block:
            self.text_block = self._open(out, {"type": "text", "text": ""})
        self._delta(out, self.text_block, {"type": "text_delta", "text": text})

    def _thought(self, out: list[bytes], text: str) -> None:
        if self.thinking_block is None or self.thinking_block != self.block:
            self.thinking_block = self._open(out, {"type": "thinking", "thinking": "", "signature": ""})
        self._delta(out, self.thinking_block, {"type": "thinking_delta", "thinking": text})

    def _tool_call(self, out: list[bytes], call: dict[str, Any]) -> None:
        position = call.get("index", 0)
        fn = call.get("function") or {}
        index = self.tool_blocks.get(position)
        if index is None:
            block: dict[str, Any] = {"type": "tool_use", "id": call.get("id") or _tool_id(), "name": fn.get("name") or "", "input": {}}
            index = self.tool_blocks[position] = self._open(out, block)
        arguments = fn.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._delta(out, index, {"type": "input_json_delta", "partial_json": arguments})

    def frame(self, payloads: list[bytes]) -> bytes:
        out: list[bytes] = []
        if not self.started:
            self._start(out)
        for payload in payloads:
            chunk = orjson.loads(payload)
            if not isinstance(chunk, dict):
                continue
            if chunk.get("usage"):
                self.usage = Usage.from_openai(chunk["usage"])
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue  # Messages has one answer
                delta = choice.get("delta") or {}
                thought = reasoning(delta) if self.thinking else None
                if thought:
                    self._thought(out, thought)
                text = delta.get("content")
                if isinstance(text, str) and text:
                    self._text(out, text)
                for call in delta.get("tool_calls") or ():
                    if isinstance(call, dict):
                        self._tool_call(out, call)
                if choice.get("finish_reason"):
                    self.finish = choice
        return b"".join(out)

    def end(self) -> bytes:
        out: list[bytes] = []
        if not self.started:
            self._start(out)
        self._close(out)
        reason, sequence = stop_reason(self.finish, self.stop_sequences, bool(self.tool_blocks))
        usage = _usage_or_count(self.usage, self.input_tokens)
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage}
        out.append(_event("message_delta", delta))
        out.append(_event("message_stop", {"type": "message_stop"}))
        return b"".join(out)
