"""An Anthropic Messages request (`POST /v1/messages`) -> the gateway's internal chat request.

Checked and translated in one pass: each 400 names the Messages field (``messages[1].content[0].source``),
not the chat field it became. What has no chat equivalent is refused by name (server tools, documents),
or dropped where it only steers Claude itself (``cache_control``, thinking budgets, earlier thinking blocks).
Top-level fields this module does not know are ignored, as a new client field should not break a request.

Mapping (Messages -> chat):
  system (string or text blocks)        -> a leading system message
  text / image blocks                   -> text / image_url content parts (images as data: or https URLs)
  assistant tool_use blocks             -> tool_calls (input as JSON arguments)
  user tool_result blocks               -> tool messages, before the user's other blocks
  tools[].input_schema                  -> tools[].function.parameters
  tool_choice auto / any / tool / none  -> "auto" / "required" / a named function / "none"
  disable_parallel_tool_use             -> parallel_tool_calls: false
  stop_sequences, max_tokens            -> stop, max_tokens
  temperature, top_p, top_k             -> the same (top_k for upstreams that take it: vLLM, llama.cpp)
  metadata.user_id                      -> user
  output_config.format (json_schema)    -> response_format json_schema (structured outputs)
  thinking enabled / adaptive           -> the upstream's reasoning text (reasoning_content) comes back
                                           as thinking blocks (signature ""); otherwise it is dropped
  stream                                -> stream with stream_options.include_usage (usage at the end)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.routing import preferences
from kernel.errors import InvalidRequest, UnsupportedParameter

Body = dict[str, Any]

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
TOOL_CHOICES = ("auto", "any", "tool", "none")
# Blocks of an earlier assistant turn that only Claude produces: dropped from the history.
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
MAX_TOOL_NAME = 128
TOOL_NAME = re.compile(rf"[a-zA-Z0-9_-]{{1,{MAX_TOOL_NAME}}}")


@dataclass(slots=True)
class ChatRequest:
    body: Body  # the internal chat request
    model: str
    stream: bool
    stop_sequences: tuple[str, ...]
    # The client asked for thinking: the upstream's reasoning text comes back as thinking blocks.
    thinking: bool = False
    # The `provider` routing preferences, parsed here (a 400 in the translation's order of checks).
    prefs: preferences.ProviderPreferences = preferences.NO_PREFERENCES


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _bad(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param)


def _typed(value: Any, param: str, kinds: tuple[type, ...], label: str) -> Any:
    if type(value) in kinds:  # the common case, without the subclass checks
        return value
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _bad(param, f"Input should be {label}, but got {_type_name(value)}")
    return value


def _string(value: Any, param: str) -> str:
    return _typed(value, param, (str,), "a valid string")  # type: ignore[no-any-return]


def _object(value: Any, param: str) -> dict[str, Any]:
    return _typed(value, param, (dict,), "a valid object")  # type: ignore[no-any-return]


def _list(value: Any, param: str) -> list[Any]:
    return _typed(value, param, (list,), "a valid array")  # type: ignore[no-any-return]


def _number(body: Body, name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    _typed(value, name, (int, float), "a valid number")
    if not lo <= value <= hi:
        raise _bad(name, f"Input should be between {lo} and {hi}, but got {value}")
    return value  # type: ignore[no-any-return]


# -- content ---------------------------------------------------------------------------


def _text_of(block: dict[str, Any], param: str) -> str:
    return _string(block.get("text"), f"{param}.text")


def _image_part(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = _object(block.get("source"), f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        media = source.get("media_type")
        if media not in IMAGE_TYPES:
            raise _bad(f"{param}.source.media_type", f"Input should be one of {', '.join(sorted(IMAGE_TYPES))}")
        data = _string(source.get("data"), f"{param}.source.data")
        url = f"data:{media};base64,{data}"
    elif kind == "url":
        url = _string(source.get("url"), f"{param}.source.url")
        if not url.startswith(("https://", "http://")):
            raise _bad(f"{param}.source.url", "Input should be an http(s) URL")
    else:
        raise _bad(f"{param}.source.type", "Input should be 'base64' or 'url'")
    return {"type": "image_url", "image_url": {"url": url}}


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """Content as a list of blocks, each an object with a string `type`."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = _list(content, param)
    for j, block in enumerate(blocks):
        _object(block, f"{param}[{j}]")
        _string(block.get("type"), f"{param}[{j}].type")
    return blocks


def _tool_result(block: dict[str, Any], param: str) -> tuple[Body, list[dict[str, Any]]]:
    """The tool message, and the images of the result (a chat tool message holds text only: they go
    to the user message that follows)."""
    call_id = _string(block.get("tool_use_id"), f"{param}.tool_use_id")
    content = block.get("content")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if content is not None:
        for k, part in enumerate(_blocks(content, f"{param}.content")):
            where = f"{param}.content[{k}]"
            if part["type"] == "text":
                texts.append(_text_of(part, where))
            elif part["type"] == "image":
                images.append(_image_part(part, where))
            else:
                raise UnsupportedParameter(
                    f"{where}.type: '{part['type']}' blocks in a tool result are not supported; use text or image.",
                    param=f"{where}.type",
                )
    is_error = block.get("is_error")
    if is_error is not None:
        _typed(is_error, f"{param}.is_error", (bool,), "a valid boolean")
    text = "\n".join(texts)
    if is_error:  # chat has no error flag: the model reads it in the text
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _user(content: Any, param: str) -> list[Body]:
    tools: list[Body] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content, param)):
        where, kind = f"{param}[{j}]", block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": _text_of(block, where)})
        elif kind == "image":
            parts.append(_image_part(block, where))
        elif kind == "tool_result":
            message, images = _tool_result(block, where)
            tools.append(message)
            parts.extend(images)
        else:
            raise UnsupportedParameter(
                f"{where}.type: '{kind}' blocks are not supported by this gateway; use text, image or tool_result.",
                param=f"{where}.type",
            )
    out = list(tools)  # tool results answer the previous turn's calls: they come first
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if len(parts) > 1 else parts[0]["text"]})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _assistant(content: Any, param: str) -> Body:
    texts: list[str] = []
    calls: list[Body] = []
    for j, block in enumerate(_blocks(content, param)):
        where, kind = f"{param}[{j}]", block["type"]
        if kind == "text":
            texts.append(_text_of(block, where))
        elif kind == "tool_use":
            call_id = _string(block.get("id"), f"{where}.id")
            name = _string(block.get("name"), f"{where}.name")
            arguments = _object(block.get("input"), f"{where}.input")
            calls.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}
            )
        elif kind in DROPPED_BLOCKS:
            continue
        else:
            raise UnsupportedParameter(
                f"{where}.type: '{kind}' blocks are not supported by this gateway; use text or tool_use.",
                param=f"{where}.type",
            )
    message: Body = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(body: Body) -> list[Body]:
    raw = body.get("messages")
    if raw is None:
        raise _bad("messages", "Field required")
    if not _list(raw, "messages"):
        raise _bad("messages", "List should have at least 1 item")
    out: list[Body] = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        _object(message, where)
        role = message.get("role")
        if role is None:
            raise _bad(f"{where}.role", "Field required")
        if "content" not in message:
            raise _bad(f"{where}.content", "Field required")
        if role == "user":
            if message["content"] in ("", []):
                raise _bad(f"{where}.content", "A user message must have non-empty content")
            out.extend(_user(message["content"], f"{where}.content"))
        elif role == "assistant":
            out.append(_assistant(message["content"], f"{where}.content"))
        else:
            raise _bad(f"{where}.role", "Input should be 'user' or 'assistant'")
    return out


def _system(body: Body) -> list[Body]:
    system = body.get("system")
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    texts = []
    for j, block in enumerate(_blocks(system, "system")):
        if block["type"] != "text":
            raise _bad(f"system[{j}].type", "Input should be 'text'")
        texts.append(_text_of(block, f"system[{j}]"))
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


# -- tools -----------------------------------------------------------------------------


def _tools(body: Body) -> list[Body]:
    raw = body.get("tools")
    if raw is None:
        return []
    out = []
    for i, tool in enumerate(_list(raw, "tools")):
        where = f"tools[{i}]"
        _object(tool, where)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise UnsupportedParameter(
                f"{where}.type: '{kind}' (an Anthropic server tool) is not supported by this gateway; "
                "declare a custom tool with name, description and input_schema.",
                param=f"{where}.type",
            )
        name = _string(tool.get("name"), f"{where}.name")
        if TOOL_NAME.fullmatch(name) is None:
            raise _bad(f"{where}.name", f"String should match pattern '^[a-zA-Z0-9_-]{{1,{MAX_TOOL_NAME}}}$'")
        schema = tool.get("input_schema")
        if schema is None:
            raise _bad(f"{where}.input_schema", "Field required")
        _object(schema, f"{where}.input_schema")
        function: Body = {"name": name, "parameters": schema}
        if tool.get("description") is not None:
            function["description"] = _string(tool["description"], f"{where}.description")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(body: Body, tools: list[Body], chat: Body) -> None:
    raw = body.get("tool_choice")
    if raw is None:
        return
    choice = _object(raw, "tool_choice")
    kind = choice.get("type")
    if kind not in TOOL_CHOICES:
        raise _bad("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
    if kind in ("any", "tool") and not tools:
        raise _bad("tool_choice", f"tool_choice '{kind}' needs 'tools'")
    if kind == "tool":
        name = _string(choice.get("name"), "tool_choice.name")
        if name not in {t["function"]["name"] for t in tools}:
            raise _bad("tool_choice.name", f"Tool '{name}' is not among 'tools'")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and _typed(disable, "tool_choice.disable_parallel_tool_use", (bool,), "a valid boolean"):
        chat["parallel_tool_calls"] = False


# -- the request -------------------------------------------------------------------------


def _max_tokens(body: Body, required: bool) -> int | None:
    value = body.get("max_tokens")
    if value is None:
        if required:
            raise _bad("max_tokens", "Field required")
        return None
    _typed(value, "max_tokens", (int,), "a valid integer")
    if value < 1:
        raise _bad("max_tokens", f"Input should be greater than or equal to 1, but got {value}")
    return value  # type: ignore[no-any-return]


def _stop_sequences(body: Body) -> tuple[str, ...]:
    raw = body.get("stop_sequences")
    if raw is None:
        return ()
    stops = _list(raw, "stop_sequences")
    for k, stop in enumerate(stops):
        if not _string(stop, f"stop_sequences[{k}]"):
            raise _bad(f"stop_sequences[{k}]", "String should have at least 1 character")
    return tuple(stops)


def _metadata(body: Body, chat: Body) -> None:
    raw = body.get("metadata")
    if raw is None:
        return
    user = _object(raw, "metadata").get("user_id")
    if user is not None:
        if len(_string(user, "metadata.user_id")) > 256:
            raise _bad("metadata.user_id", "String should have at most 256 characters")
        chat["user"] = user


def _output_config(body: Body, chat: Body) -> None:
    raw = body.get("output_config")
    if raw is None:
        return
    fmt = _object(raw, "output_config").get("format")  # `effort` steers Claude only
    if fmt is None:
        return
    _object(fmt, "output_config.format")
    if fmt.get("type") != "json_schema":
        raise _bad("output_config.format.type", "Input should be 'json_schema'")
    schema = _object(fmt.get("schema"), "output_config.format.schema")
    chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _thinking(body: Body) -> bool:
    raw = body.get("thinking")
    if raw is None:
        return False
    kind = _object(raw, "thinking").get("type")
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("thinking.type", "Input should be 'enabled', 'disabled' or 'adaptive'")
    return bool(kind != "disabled")


def _model(body: Body) -> str:
    model = body.get("model")
    if model is None:
        raise _bad("model", "Field required")
    if not _string(model, "model"):
        raise _bad("model", "String should have at least 1 character")
    return model  # type: ignore[no-any-return]


USER_BLOCKS = frozenset({"text", "image", "tool_result"})
ASSISTANT_BLOCKS = frozenset({"text", "tool_use"} | DROPPED_BLOCKS)


def _stand_in(block: Body) -> Body:
    """A block the chat view cannot hold, as text of its size (a document's base64 or text, a server
    tool's result): routing's and the limits' prompt estimate stays an upper bound."""
    return {"type": "text", "text": orjson.dumps(block).decode()}


def _kept(content: Any, kinds: frozenset[str]) -> Any:
    if not isinstance(content, list):
        return content
    return [b if not isinstance(b, dict) or b.get("type") in kinds else _stand_in(b) for b in content]


def carried(body: Body) -> Body:
    """The body less what the chat translation refuses (server tools, MCP servers; document and other
    block kinds become text of their size, `_stand_in`): the chat view of a request passed through to an upstream that takes it as is
    (`gateway.pipeline.native`), for routing and limits only. Malformed input stays for `to_chat` to refuse."""
    out = {k: v for k, v in body.items() if k != "mcp_servers"}
    if isinstance(tools := body.get("tools"), list):
        out["tools"] = [t for t in tools if not isinstance(t, dict) or t.get("type") in (None, "custom")]
        names = {t.get("name") for t in out["tools"] if isinstance(t, dict)}
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and (choice.get("name") not in names if choice.get("type") == "tool" else not names):
            out.pop("tool_choice")  # it named, or needed, a tool that was left out
    if isinstance(messages := body.get("messages"), list):
        out["messages"] = [_carried_message(m) for m in messages]
    return out


def _carried_message(message: Any) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    if message.get("role") == "assistant":
        return {**message, "content": _kept(message["content"], ASSISTANT_BLOCKS)}
    content = []
    for block in _kept(message["content"], USER_BLOCKS):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            block = {**block, "content": _kept(block.get("content"), frozenset({"text", "image"}))}
        content.append(block)
    return {**message, "content": content or [{"type": "text", "text": ""}]}


def to_chat(body: Body, *, counting: bool = False) -> ChatRequest:
    """The chat request for a Messages body; `counting` (count_tokens) does not need max_tokens."""
    model = _model(body)
    stream = body.get("stream")
    if stream is not None:
        _typed(stream, "stream", (bool,), "a valid boolean")
    chat: Body = {"model": model, "messages": _system(body) + _messages(body)}
    max_tokens = _max_tokens(body, required=not counting)
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    tools = _tools(body)
    if tools:
        chat["tools"] = tools
    _tool_choice(body, tools, chat)
    stops = _stop_sequences(body)
    if stops:
        chat["stop"] = list(stops)
    for name, hi in (("temperature", 1.0), ("top_p", 1.0)):
        value = _number(body, name, 0.0, hi)
        if value is not None:
            chat[name] = value
    top_k = body.get("top_k")
    if top_k is not None:
        _typed(top_k, "top_k", (int,), "a valid integer")
        if top_k < 0:
            raise _bad("top_k", f"Input should be greater than or equal to 0, but got {top_k}")
        chat["top_k"] = top_k
    _metadata(body, chat)
    _output_config(body, chat)
    if body.get("mcp_servers"):
        raise UnsupportedParameter("mcp_servers: MCP connectors are not supported by this gateway.", param="mcp_servers")
    prefs = preferences.NO_PREFERENCES
    if "provider" in body:  # the gateway's routing preferences, as on /v1/chat/completions
        prefs = preferences.parse(body["provider"])
        chat["provider"] = body["provider"]
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return ChatRequest(chat, model, bool(stream), stops, _thinking(body), prefs)
