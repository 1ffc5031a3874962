"""Responses `input` (a string or items) -> chat messages plus the input items as stored, and
the type checks the other Responses fields share. Each 400 names the exact `param`
(``input[2].content[0].type``), as OpenAI does.
"""

from __future__ import annotations

import secrets
from typing import Any

from kernel.errors import InvalidRequest, UnsupportedParameter

Body = dict[str, Any]

INPUT_ROLES = ("user", "assistant", "system", "developer")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def kind_of(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def typed(value: Any, param: str, kinds: tuple[type, ...], label: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise bad(param, f"Invalid type for '{param}': expected {label}, but got {kind_of(value)}.")
    return value


def required_str(obj: Body, key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        raise bad(f"{where}.{key}", f"Missing required parameter: '{where}.{key}'.")
    if not isinstance(value, str):
        raise bad(f"{where}.{key}", f"Invalid type for '{where}.{key}': expected a string, but got {kind_of(value)}.")
    return value


def _part(part: Any, where: str, role: str) -> Body:
    """One input content part as a chat content part."""
    if not isinstance(part, dict):
        raise bad(where, f"Invalid type for '{where}': expected an object, but got {kind_of(part)}.")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": required_str(part, "text", where)}
    if kind == "refusal":
        return {"type": "text", "text": required_str(part, "refusal", where)}
    if kind == "input_image" and role == "user":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise UnsupportedParameter(
                f"Invalid '{where}': only images given by 'image_url' (a URL or a data URL) are supported; "
                "file ids are not.",
                param=f"{where}.image_url",
            )
        image: Body = {"url": url}
        detail = part.get("detail")
        if detail is not None:
            if detail not in ("low", "high", "auto"):
                raise bad(f"{where}.detail", f"Invalid value: '{detail}'. Supported values are: 'low', 'high', and 'auto'.")
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if kind in ("input_file", "input_audio", "input_image"):
        raise UnsupportedParameter(f"Invalid '{where}.type': '{kind}' parts are not supported here.", param=f"{where}.type")
    raise bad(
        f"{where}.type",
        f"Invalid value for '{where}.type': {kind!r}. Supported values are: 'input_text', 'input_image', and 'output_text'.",
    )


def _message(item: Body, where: str) -> tuple[Body, Body]:
    """A message item as (chat message, stored input item)."""
    role = item.get("role")
    if role is None:
        raise bad(f"{where}.role", f"Missing required parameter: '{where}.role'.")
    if role not in INPUT_ROLES:
        raise bad(
            f"{where}.role",
            f"Invalid value: {role!r}. Supported values are: 'user', 'assistant', 'system', and 'developer'.",
        )
    content = item.get("content")
    if isinstance(content, str):
        parts = [{"type": "input_text" if role != "assistant" else "output_text", "text": content}]
        chat_content: Any = content
    elif isinstance(content, list):
        chat_parts = [_part(p, f"{where}.content[{j}]", role) for j, p in enumerate(content)]
        parts = content
        # Roles other than user take text only at most chat upstreams: join their text parts.
        if role == "user":
            chat_content = chat_parts
        else:
            chat_content = "".join(p["text"] for p in chat_parts)
    elif content is None:
        raise bad(f"{where}.content", f"Missing required parameter: '{where}.content'.")
    else:
        raise bad(
            f"{where}.content",
            f"Invalid type for '{where}.content': expected a string or an array of content parts, but got {kind_of(content)}.",
        )
    # Open chat templates rarely know 'developer': it is the system prompt there.
    chat = {"role": "system" if role == "developer" else role, "content": chat_content}
    stored = {"type": "message", "id": item.get("id") or new_id("msg"), "role": role, "content": parts, "status": "completed"}
    return chat, stored


def _function_call(item: Body, where: str) -> tuple[Body, Body]:
    call_id = required_str(item, "call_id", where)
    name = required_str(item, "name", where)
    arguments = required_str(item, "arguments", where)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    stored = {
        "type": "function_call",
        "id": item.get("id") or new_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }
    return call, stored


def _call_output(item: Body, where: str) -> tuple[Body, Body]:
    call_id = required_str(item, "call_id", where)
    output = item.get("output")
    if isinstance(output, list):  # content parts: the text is what a chat tool message can carry
        text = "".join(_part(p, f"{where}.output[{j}]", "tool")["text"] for j, p in enumerate(output))
    elif isinstance(output, str):
        text = output
    else:
        raise bad(
            f"{where}.output", f"Invalid type for '{where}.output': expected a string or an array, but got {kind_of(output)}."
        )
    stored = {"type": "function_call_output", "id": item.get("id") or new_id("fco"), "call_id": call_id, "output": output}
    stored["status"] = "completed"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, stored


def parse_input(value: Any) -> tuple[list[Body], list[Body]]:
    """The input as (chat messages, stored input items)."""
    if value is None:
        raise bad("input", "Missing required parameter: 'input'.")
    if isinstance(value, str):
        chat, stored = _message({"role": "user", "content": value}, "input")
        return [chat], [stored]
    if not isinstance(value, list):
        raise bad("input", f"Invalid type for 'input': expected a string or an array of input items, but got {kind_of(value)}.")
    if not value:
        raise bad("input", "Invalid 'input': empty array. Expected an array with minimum length 1.")
    messages: list[Body] = []
    items: list[Body] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"Invalid type for '{where}': expected an object, but got {kind_of(item)}.")
        kind = item.get("type", "message")
        if kind == "message":
            chat, stored = _message(item, where)
            messages.append(chat)
        elif kind == "function_call":
            call, stored = _function_call(item, where)
            last = messages[-1] if messages else None
            # Consecutive calls (and calls right after the assistant's text) are one chat message.
            if last is not None and last["role"] == "assistant" and isinstance(last.get("content"), (str, type(None))):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            chat, stored = _call_output(item, where)
            messages.append(chat)
        elif kind == "reasoning":
            continue  # a reasoning model's item sent back: nothing a chat upstream can take
        else:
            raise UnsupportedParameter(
                f"Invalid value for '{where}.type': {kind!r} items are not supported by this gateway; supported are "
                "'message', 'function_call', 'function_call_output' (and 'reasoning', which is ignored).",
                param=f"{where}.type",
            )
        items.append(stored)
    return messages, items
