"""OpenAI Responses request -> the gateway's internal chat request (pure functions, no I/O).

`translate` validates a `POST /v1/responses` body field by field (each 400 names the exact
`param`, as OpenAI does: ``input[2].content[0].type``) and builds the Chat Completions body that
the pipeline routes, dispatches and accounts like any other chat request. A conversation stored
under `previous_response_id` arrives as chat messages and is put before this turn's input.

Instructions are not part of the stored conversation: OpenAI does not carry a previous
response's `instructions` into the next turn, so neither does this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.translate.responses_input import bad, kind_of, parse_input, required_str, typed
from kernel.errors import UnsupportedParameter

Body = dict[str, Any]

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


@dataclass(slots=True)
class ChatRequest:
    """What the Responses request became: the chat body, this turn's messages (stored with the
    answer for the next turn), and its input items as `input_items.list` returns them."""

    body: Body
    turn: list[Body]
    input_items: list[Body]
    logprobs: bool = False
    echo: Body = field(default_factory=dict)


def _field(body: Body, name: str, kinds: tuple[type, ...], label: str) -> Any:
    return typed(body.get(name), name, kinds, label)


def _ranged(body: Body, name: str, lo: float, hi: float | None, integer: bool = False) -> Any:
    value = _field(body, name, (int,) if integer else (int, float), "an integer" if integer else "a number")
    if value is not None and (value < lo or (hi is not None and value > hi)):
        bound = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        raise bad(name, f"Invalid '{name}': {value} is out of range; expected a value {bound}.")
    return value


# -- tools and format ----------------------------------------------------------------


def _tools(value: Any) -> tuple[list[Body], list[Body], set[str]]:
    """(chat tools, the tools as echoed in the response, their names)."""
    tools = typed(value, "tools", (list,), "an array")
    chat: list[Body] = []
    echo: list[Body] = []
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise bad(where, f"Invalid type for '{where}': expected an object, but got {kind_of(tool)}.")
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"Invalid value for '{where}.type': {tool.get('type')!r}. Only 'function' tools are supported by this "
                "gateway (hosted tools such as web search are not).",
                param=f"{where}.type",
            )
        name = required_str(tool, "name", where)
        if not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
            raise bad(f"{where}.name", f"Invalid '{where}.name': must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes.")
        params = typed(tool.get("parameters"), f"{where}.parameters", (dict,), "an object")
        description = typed(tool.get("description"), f"{where}.description", (str,), "a string")
        strict = typed(tool.get("strict"), f"{where}.strict", (bool,), "a boolean")
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
            raise bad("tool_choice", f"Invalid value: {value!r}. Supported values are: 'none', 'auto', and 'required'.")
        if value == "required" and not names:
            raise bad("tool_choice", "'tool_choice' is 'required' but no 'tools' were given.")
        return value
    if not isinstance(value, dict):
        raise bad("tool_choice", f"Invalid type for 'tool_choice': expected a string or an object, but got {kind_of(value)}.")
    if value.get("type") != "function":
        raise UnsupportedParameter(
            f"Invalid value for 'tool_choice.type': {value.get('type')!r}. Supported are 'none', 'auto', 'required' "
            "and {'type': 'function', 'name': ...}.",
            param="tool_choice.type",
        )
    name = required_str(value, "name", "tool_choice")
    if name not in names:
        raise bad("tool_choice.name", f"Invalid 'tool_choice': function {name!r} is not among 'tools'.")
    return {"type": "function", "function": {"name": name}}


def _text_format(value: Any) -> tuple[Body | None, Body]:
    """(chat response_format or None, the `text` echoed in the response)."""
    text = typed(value, "text", (dict,), "an object")
    fmt = typed((text or {}).get("format"), "text.format", (dict,), "an object")
    if fmt is None or fmt.get("type") == "text":
        return None, {"format": {"type": "text"}}
    kind = fmt.get("type")
    if kind == "json_object":
        return {"type": "json_object"}, {"format": {"type": "json_object"}}
    if kind != "json_schema":
        raise bad("text.format.type", f"Invalid value: {kind!r}. Supported values are: 'text', 'json_object', and 'json_schema'.")
    name = required_str(fmt, "name", "text.format")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise bad("text.format.schema", "Missing required parameter: 'text.format.schema' (an object).")
    spec: Body = {"name": name, "schema": schema}
    for key, kinds, label in (("strict", (bool,), "a boolean"), ("description", (str,), "a string")):
        if fmt.get(key) is not None:
            spec[key] = typed(fmt[key], f"text.format.{key}", kinds, label)
    return {"type": "json_schema", "json_schema": spec}, {"format": {"type": "json_schema", **spec}}


def _include(value: Any) -> bool:
    """Whether logprobs were asked for; other known values have nothing to add here."""
    include = typed(value, "include", (list,), "an array")
    logprobs = False
    for i, entry in enumerate(include or ()):
        if not isinstance(entry, str):  # [] or {} would not even hash for the set lookup below
            raise bad(f"include[{i}]", f"Invalid type for 'include[{i}]': expected a string.")
        if entry == LOGPROBS_INCLUDE:
            logprobs = True
        elif entry not in NOTHING_TO_INCLUDE:
            raise bad(f"include[{i}]", f"Invalid value for 'include[{i}]': {entry!r}.")
    return logprobs


def _metadata(value: Any) -> Body:
    meta = typed(value, "metadata", (dict,), "an object")
    if meta is None:
        return {}
    if len(meta) > 16:
        raise bad("metadata", "Invalid 'metadata': at most 16 keys are allowed.")
    for key, item in meta.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise bad(f"metadata.{key}", f"Invalid 'metadata.{key}': keys take up to 64 characters, values are strings of up to 512.")
    return dict(meta)


# -- the request ----------------------------------------------------------------------


def validate_envelope(body: Body) -> None:
    """The fields read before the stored conversation is loaded."""
    model = body.get("model")
    if model is None:
        raise bad("model", "Missing required parameter: 'model'.")
    if not isinstance(model, str) or not model:
        raise bad("model", f"Invalid type for 'model': expected a non-empty string, but got {kind_of(model)}.")
    for name, message in UNSUPPORTED.items():
        if body.get(name) not in (None, False):
            raise UnsupportedParameter(message, param=name)
    _field(body, "stream", (bool,), "a boolean")
    _field(body, "store", (bool,), "a boolean")
    prev = _field(body, "previous_response_id", (str,), "a string")
    if prev is not None and not prev:
        raise bad("previous_response_id", "Invalid 'previous_response_id': empty string.")


def translate(body: Body, history: list[Body] | None = None) -> ChatRequest:
    """The chat request for a validated envelope (`validate_envelope`) and the stored conversation."""
    instructions = _field(body, "instructions", (str,), "a string")
    turn, items = parse_input(body.get("input"))
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
        raise bad("truncation", f"Invalid value: {truncation!r}. Supported values are: 'auto' and 'disabled'.")
    reasoning = _field(body, "reasoning", (dict,), "an object")
    _field(body, "user", (str,), "a string")
    if body.get("stream_options") is not None and not body.get("stream"):
        raise bad("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")

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
