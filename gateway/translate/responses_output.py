"""Chat Completions answer -> OpenAI Responses `response` object (pure functions, no I/O).

Also the other direction the gateway needs for `previous_response_id`: a response's output as
the assistant chat message that the next turn's conversation carries.
"""

from __future__ import annotations

from typing import Any

from gateway.translate.responses_request import new_id

Body = dict[str, Any]

# Chat finish_reason -> (response status, incomplete_details.reason)
FINISH = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "function_call": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_from_chat(usage: Any) -> Body | None:
    """Chat usage -> Responses usage (input/output tokens with their details)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _count(prompt_details.get("cached_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(completion_details.get("reasoning_tokens"))},
        "total_tokens": _count(usage.get("total_tokens")) or prompt + completion,
    }


def logprobs_from_chat(entries: Any) -> list[Body]:
    """Chat `logprobs.content` entries -> Responses output_text logprobs (same fields)."""
    out = []
    for entry in entries or ():
        if not isinstance(entry, dict):
            continue
        out.append(
            {
                "token": entry.get("token", ""),
                "logprob": entry.get("logprob", 0.0),
                "bytes": entry.get("bytes") or [],
                "top_logprobs": [
                    {"token": t.get("token", ""), "logprob": t.get("logprob", 0.0), "bytes": t.get("bytes") or []}
                    for t in entry.get("top_logprobs") or ()
                    if isinstance(t, dict)
                ],
            }
        )
    return out


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
    status, reason = FINISH.get(finish_reason, ("completed", None))
    response["status"] = status
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["usage"] = usage


def response_from_chat(chat: Body, response_id: str, created_at: int, model: str, echo: Body, logprobs: bool) -> Body:
    """A non-streamed chat completion as a Responses `response`."""
    response = envelope(response_id, created_at, model, echo, "completed")
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    status, _ = FINISH.get(choice.get("finish_reason"), ("completed", None))
    parts: list[Body] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        lp = logprobs_from_chat((choice.get("logprobs") or {}).get("content")) if logprobs else None
        parts.append(text_part(content, lp))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    if parts:
        response["output"].append(message_item(new_id("msg"), parts, status))
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        fn = call.get("function") or {}
        response["output"].append(
            call_item(new_id("fc"), call.get("id") or new_id("call"), fn.get("name", ""), fn.get("arguments") or "", "completed")
        )
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
