"""Chat Completions answer -> OpenAI Responses `response` object (pure functions, no I/O).

Also the other direction the gateway needs for `previous_response_id`: a response's output as
the assistant chat message that the next turn's conversation carries.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.translate.responses_input import new_id

Body = dict[str, Any]

# Chat finish_reason -> (response status, incomplete_details.reason)
FINISH = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "function_call": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
}


def obj(value: Any) -> Body:
    """`value` when it is an object, else {}: upstream answers are untrusted in shape."""
    return value if isinstance(value, dict) else {}


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def status_of(finish_reason: Any) -> tuple[str, str | None]:
    return FINISH.get(finish_reason, ("completed", None)) if isinstance(finish_reason, str) else ("completed", None)


def chat_logprobs(choice: Body) -> Any:
    return obj(choice.get("logprobs")).get("content")


def arguments_of(fn: Body) -> str:
    args = fn.get("arguments")
    if isinstance(args, str):
        return args
    return orjson.dumps(args).decode() if isinstance(args, dict) else ""  # some upstreams send an object


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_from_chat(usage: Any) -> Body | None:
    """Chat usage -> Responses usage (input/output tokens with their details)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    prompt_details = obj(usage.get("prompt_tokens_details"))
    completion_details = obj(usage.get("completion_tokens_details"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _count(prompt_details.get("cached_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(completion_details.get("reasoning_tokens"))},
        "total_tokens": _count(usage.get("total_tokens")) or prompt + completion,
    }


def logprobs_from_chat(entries: Any) -> list[Body]:
    """Chat `logprobs.content` entries -> Responses output_text logprobs (same fields)."""
    if not isinstance(entries, list):
        return []
    return [
        {
            **_token(entry),
            "top_logprobs": [_token(t) for t in entry.get("top_logprobs") or () if isinstance(t, dict)]
            if isinstance(entry.get("top_logprobs"), list)
            else [],
        }
        for entry in entries
        if isinstance(entry, dict)
    ]


def _token(entry: Body) -> Body:
    logprob = entry.get("logprob")
    raw = entry.get("bytes")
    return {
        "token": as_text(entry.get("token")),
        "logprob": logprob if isinstance(logprob, (int, float)) and not isinstance(logprob, bool) else 0.0,
        "bytes": raw if isinstance(raw, list) else [],
    }


def text_part(text: str, logprobs: list[Body] | None) -> Body:
    part: Body = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def message_item(item_id: str, parts: list[Body], status: str) -> Body:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": parts}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> Body:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments, "status": status}


def envelope(response_id: str, created_at: int, model: str, echo: Body, status: str) -> Body:
    """A response object without output yet (also `response.created`'s)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "usage": None,
        **echo,
    }


def finish(response: Body, finish_reason: Any, usage: Body | None) -> None:
    status, reason = status_of(finish_reason)
    response["status"] = status
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["usage"] = usage


def response_from_chat(chat: Body, response_id: str, created_at: int, model: str, echo: Body, logprobs: bool) -> Body:
    """A non-streamed chat completion as a Responses `response`."""
    response = envelope(response_id, created_at, model, echo, "completed")
    choices = chat.get("choices")
    choice = obj(choices[0]) if isinstance(choices, list) and choices else {}
    message = obj(choice.get("message"))
    status, _ = status_of(choice.get("finish_reason"))
    parts: list[Body] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        lp = logprobs_from_chat(chat_logprobs(choice)) if logprobs else None
        parts.append(text_part(content, lp))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    if parts:
        response["output"].append(message_item(new_id("msg"), parts, status))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        fn = obj(call.get("function"))
        given = call.get("id")
        call_id = given if isinstance(given, str) and given else new_id("call")
        response["output"].append(call_item(new_id("fc"), call_id, as_text(fn.get("name")), arguments_of(fn), "completed"))
    finish(response, choice.get("finish_reason"), usage_from_chat(chat.get("usage")))
    return response


def output_text(response: Body) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output", ())
        if item.get("type") == "message"
        for part in item.get("content", ())
        if part.get("type") == "output_text"
    )


def assistant_message(response: Body) -> Body | None:
    """The response's output as the chat assistant message of the stored conversation."""
    calls = [
        {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
        for item in response.get("output", ())
        if item.get("type") == "function_call"
    ]
    text = output_text(response)
    if not text and not calls:
        return None
    message: Body = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message
