"""OpenAI Responses request -> the gateway's internal chat request (pure functions, no I/O).

`translate` validates a `POST /v1/responses` body field by field (each 400 names the exact
`param`, as OpenAI does: ``input[2].content[0].type``) and builds the Chat Completions body that
the pipeline routes, dispatches and accounts like any other chat request. A conversation stored
under `previous_response_id` arrives as chat messages and is put before this turn's input.

Instructions are not part of the stored conversation: OpenAI does not carry a previous
response's `instructions` into the next turn, so neither does this.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import InvalidRequest, UnsupportedParameter

Body = dict[str, Any]

INPUT_ROLES = ("user", "assistant", "system", "developer")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Accepted and answered with nothing extra: they concern items this gateway never produces.
NOTHING_TO_INCLUDE = frozenset(
    {
        "reasoning.encrypted_content",
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
    }
)
# Responses fields with no Chat Completions counterpart that this gateway does not serve.
UNSUPPORTED = {
    "background": "Background responses are not supported by this gateway; omit 'background' or set it to false.",
    "conversation": "The Conversations API is not supported by this gateway; chain turns with 'previous_response_id'.",
    "prompt": "Stored prompt templates are not supported by this gateway; send 'input' and 'instructions'.",
    "n": "The Responses API answers one output per request; 'n' is not a Responses parameter.",
    "max_tool_calls": "'max_tool_calls' is not supported by this gateway.",
}
# Responses-only fields: never sent to a Chat Completions upstream.
RESPONSES_ONLY = frozenset(
    {
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "max_output_tokens",
        "store",
        "previous_response_id",
        "include",
        "metadata",
        "truncation",
        "reasoning",
        "stream_options",
        "top_logprobs",
        *UNSUPPORTED,
    }
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


@dataclass(slots=True)
class ChatRequest:
    """What the Responses request became: the chat body, this turn's messages (stored with the
    answer for the next turn), and its input items as `input_items.list` returns them."""

    body: Body
    turn: list[Body]
    input_items: list[Body]
    logprobs: bool = False
    echo: Body = field(default_factory=dict)


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _typed(value: Any, param: str, kinds: tuple[type, ...], label: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _bad(param, f"Invalid type for '{param}': expected {label}, but got {_kind(value)}.")
    return value


def _field(body: Body, name: str, kinds: tuple[type, ...], label: str) -> Any:
    return _typed(body.get(name), name, kinds, label)


def _ranged(body: Body, name: str, lo: float, hi: float | None, integer: bool = False) -> Any:
    value = _field(body, name, (int,) if integer else (int, float), "an integer" if integer else "a number")
    if value is not None and (value < lo or (hi is not None and value > hi)):
        bound = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        raise _bad(name, f"Invalid '{name}': {value} is out of range; expected a value {bound}.")
    return value


def _required_str(obj: Body, key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        raise _bad(f"{where}.{key}", f"Missing required parameter: '{where}.{key}'.")
    if not isinstance(value, str):
        raise _bad(f"{where}.{key}", f"Invalid type for '{where}.{key}': expected a string, but got {_kind(value)}.")
    return value


# -- input ------------------------------------------------------------------------------


def _part(part: Any, where: str, role: str) -> Body:
    """One input content part as a chat content part."""
    if not isinstance(part, dict):
        raise _bad(where, f"Invalid type for '{where}': expected an object, but got {_kind(part)}.")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": _required_str(part, "text", where)}
    if kind == "refusal":
        return {"type": "text", "text": _required_str(part, "refusal", where)}
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
                raise _bad(f"{where}.detail", f"Invalid value: '{detail}'. Supported values are: 'low', 'high', and 'auto'.")
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if kind in ("input_file", "input_audio", "input_image"):
        raise UnsupportedParameter(f"Invalid '{where}.type': '{kind}' parts are not supported here.", param=f"{where}.type")
    raise _bad(
        f"{where}.type",
        f"Invalid value for '{where}.type': {kind!r}. Supported values are: 'input_text', 'input_image', and 'output_text'.",
    )


def _message(item: Body, where: str) -> tuple[Body, Body]:
    """A message item as (chat message, stored input item)."""
    role = item.get("role")
    if role is None:
        raise _bad(f"{where}.role", f"Missing required parameter: '{where}.role'.")
    if role not in INPUT_ROLES:
        raise _bad(
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
        raise _bad(f"{where}.content", f"Missing required parameter: '{where}.content'.")
    else:
        raise _bad(
            f"{where}.content",
            f"Invalid type for '{where}.content': expected a string or an array of content parts, but got {_kind(content)}.",
        )
    # Open chat templates rarely know 'developer': it is the system prompt there.
    chat = {"role": "system" if role == "developer" else role, "content": chat_content}
    stored = {"type": "message", "id": item.get("id") or new_id("msg"), "role": role, "content": parts, "status": "completed"}
    return chat, stored


def _function_call(item: Body, where: str) -> tuple[Body, Body]:
    call_id = _required_str(item, "call_id", where)
    name = _required_str(item, "name", where)
    arguments = _required_str(item, "arguments", where)
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
    call_id = _required_str(item, "call_id", where)
    output = item.get("output")
    if isinstance(output, list):  # content parts: the text is what a chat tool message can carry
        text = "".join(_part(p, f"{where}.output[{j}]", "tool")["text"] for j, p in enumerate(output))
    elif isinstance(output, str):
        text = output
    else:
        raise _bad(
            f"{where}.output", f"Invalid type for '{where}.output': expected a string or an array, but got {_kind(output)}."
        )
    stored = {"type": "function_call_output", "id": item.get("id") or new_id("fco"), "call_id": call_id, "output": output}
    stored["status"] = "completed"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, stored


def _input(value: Any) -> tuple[list[Body], list[Body]]:
    """The input as (chat messages, stored input items)."""
    if value is None:
        raise _bad("input", "Missing required parameter: 'input'.")
    if isinstance(value, str):
        chat, stored = _message({"role": "user", "content": value}, "input")
        return [chat], [stored]
    if not isinstance(value, list):
        raise _bad("input", f"Invalid type for 'input': expected a string or an array of input items, but got {_kind(value)}.")
    if not value:
        raise _bad("input", "Invalid 'input': empty array. Expected an array with minimum length 1.")
    messages: list[Body] = []
    items: list[Body] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(where, f"Invalid type for '{where}': expected an object, but got {_kind(item)}.")
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


# -- tools and format ----------------------------------------------------------------


def _tools(value: Any) -> tuple[list[Body], list[Body], set[str]]:
    """(chat tools, the tools as echoed in the response, their names)."""
    tools = _typed(value, "tools", (list,), "an array")
    chat: list[Body] = []
    echo: list[Body] = []
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(where, f"Invalid type for '{where}': expected an object, but got {_kind(tool)}.")
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"Invalid value for '{where}.type': {tool.get('type')!r}. Only 'function' tools are supported by this "
                "gateway (hosted tools such as web search are not).",
                param=f"{where}.type",
            )
        name = _required_str(tool, "name", where)
        if not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
            raise _bad(f"{where}.name", f"Invalid '{where}.name': must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes.")
        params = _typed(tool.get("parameters"), f"{where}.parameters", (dict,), "an object")
        description = _typed(tool.get("description"), f"{where}.description", (str,), "a string")
        strict = _typed(tool.get("strict"), f"{where}.strict", (bool,), "a boolean")
        fn: Body = {"name": name}
        if description is not None:
            fn["description"] = description
        fn["parameters"] = params if params is not None else {"type": "object", "properties": {}}
        if strict is not None:
            fn["strict"] = strict
        chat.append({"type": "function", "function": fn})
        echo.append({"type": "function", "name": name, "description": description, "parameters": params, "strict": strict})
        names.add(name)
    return chat, echo, names


def _tool_choice(value: Any, names: set[str]) -> Any:
    """The chat tool_choice (None: not given)."""
    if value is None:
        return None
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise _bad("tool_choice", f"Invalid value: {value!r}. Supported values are: 'none', 'auto', and 'required'.")
        if value == "required" and not names:
            raise _bad("tool_choice", "'tool_choice' is 'required' but no 'tools' were given.")
        return value
    if not isinstance(value, dict):
        raise _bad("tool_choice", f"Invalid type for 'tool_choice': expected a string or an object, but got {_kind(value)}.")
    if value.get("type") != "function":
        raise UnsupportedParameter(
            f"Invalid value for 'tool_choice.type': {value.get('type')!r}. Supported are 'none', 'auto', 'required' "
            "and {'type': 'function', 'name': ...}.",
            param="tool_choice.type",
        )
    name = _required_str(value, "name", "tool_choice")
    if name not in names:
        raise _bad("tool_choice.name", f"Invalid 'tool_choice': function {name!r} is not among 'tools'.")
    return {"type": "function", "function": {"name": name}}


def _text_format(value: Any) -> tuple[Body | None, Body]:
    """(chat response_format or None, the `text` echoed in the response)."""
    text = _typed(value, "text", (dict,), "an object")
    fmt = _typed((text or {}).get("format"), "text.format", (dict,), "an object")
    if fmt is None or fmt.get("type") == "text":
        return None, {"format": {"type": "text"}}
    kind = fmt.get("type")
    if kind == "json_object":
        return {"type": "json_object"}, {"format": {"type": "json_object"}}
    if kind != "json_schema":
        raise _bad("text.format.type", f"Invalid value: {kind!r}. Supported values are: 'text', 'json_object', and 'json_schema'.")
    name = _required_str(fmt, "name", "text.format")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise _bad("text.format.schema", "Missing required parameter: 'text.format.schema' (an object).")
    spec: Body = {"name": name, "schema": schema}
    for key, kinds, label in (("strict", (bool,), "a boolean"), ("description", (str,), "a string")):
        if fmt.get(key) is not None:
            spec[key] = _typed(fmt[key], f"text.format.{key}", kinds, label)
    return {"type": "json_schema", "json_schema": spec}, {"format": {"type": "json_schema", **spec}}


def _include(value: Any) -> bool:
    """Whether logprobs were asked for; other known values have nothing to add here."""
    include = _typed(value, "include", (list,), "an array")
    logprobs = False
    for i, entry in enumerate(include or ()):
        if entry == LOGPROBS_INCLUDE:
            logprobs = True
        elif entry not in NOTHING_TO_INCLUDE:
            raise _bad(f"include[{i}]", f"Invalid value for 'include[{i}]': {entry!r}.")
    return logprobs


def _metadata(value: Any) -> Body:
    meta = _typed(value, "metadata", (dict,), "an object")
    if meta is None:
        return {}
    if len(meta) > 16:
        raise _bad("metadata", "Invalid 'metadata': at most 16 keys are allowed.")
    for key, item in meta.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise _bad(f"metadata.{key}", f"Invalid 'metadata.{key}': keys take up to 64 characters, values are strings of up to 512.")
    return meta


# -- the request ----------------------------------------------------------------------


def validate_envelope(body: Body) -> None:
    """The fields read before the stored conversation is loaded."""
    model = body.get("model")
    if model is None:
        raise _bad("model", "Missing required parameter: 'model'.")
    if not isinstance(model, str) or not model:
        raise _bad("model", f"Invalid type for 'model': expected a non-empty string, but got {_kind(model)}.")
    for name, message in UNSUPPORTED.items():
        if body.get(name) not in (None, False):
            raise UnsupportedParameter(message, param=name)
    _field(body, "stream", (bool,), "a boolean")
    _field(body, "store", (bool,), "a boolean")
    prev = _field(body, "previous_response_id", (str,), "a string")
    if prev is not None and not prev:
        raise _bad("previous_response_id", "Invalid 'previous_response_id': empty string.")


def translate(body: Body, history: list[Body] | None = None) -> ChatRequest:
    """The chat request for a validated envelope (`validate_envelope`) and the stored conversation."""
    instructions = _field(body, "instructions", (str,), "a string")
    turn, items = _input(body.get("input"))
    chat_tools, echo_tools, names = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), names)
    parallel = _field(body, "parallel_tool_calls", (bool,), "a boolean")
    response_format, text = _text_format(body.get("text"))
    max_output = _ranged(body, "max_output_tokens", 1, None, integer=True)
    temperature = _ranged(body, "temperature", 0, 2)
    top_p = _ranged(body, "top_p", 0, 1)
    top_logprobs = _ranged(body, "top_logprobs", 0, 20, integer=True)
    logprobs = _include(body.get("include"))
    metadata = _metadata(body.get("metadata"))
    truncation = body.get("truncation")
    if truncation not in (None, "auto", "disabled"):
        raise _bad("truncation", f"Invalid value: {truncation!r}. Supported values are: 'auto' and 'disabled'.")
    reasoning = _field(body, "reasoning", (dict,), "an object")
    _field(body, "user", (str,), "a string")
    if body.get("stream_options") is not None and not body.get("stream"):
        raise _bad("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")

    messages = [{"role": "system", "content": instructions}] if instructions else []
    messages.extend(history or ())
    messages.extend(turn)
    chat: Body = {k: v for k, v in body.items() if k not in RESPONSES_ONLY}  # unknown fields pass through
    chat["messages"] = messages
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # usage for response.completed
    else:
        chat.pop("stream", None)
    if chat_tools:
        chat["tools"] = chat_tools
    if tool_choice is not None and chat_tools:
        chat["tool_choice"] = tool_choice
    if parallel is not None and chat_tools:
        chat["parallel_tool_calls"] = parallel
    if response_format is not None:
        chat["response_format"] = response_format
    if max_output is not None:
        chat["max_tokens"] = max_output
    if logprobs:
        chat["logprobs"] = True
        if top_logprobs:
            chat["top_logprobs"] = top_logprobs
    if reasoning and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    echo: Body = {
        "instructions": instructions,
        "max_output_tokens": max_output,
        "metadata": metadata,
        "parallel_tool_calls": True if parallel is None else parallel,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": (reasoning or {}).get("effort"), "summary": (reasoning or {}).get("summary")},
        "store": body.get("store") is not False,
        "temperature": temperature,
        "text": text,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": echo_tools,
        "top_logprobs": top_logprobs,
        "top_p": top_p,
        "truncation": truncation or "disabled",
        "user": body.get("user"),
    }
    return ChatRequest(chat, turn, items, logprobs, echo)
