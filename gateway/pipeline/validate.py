"""Parse and validate request bodies against the OpenAI schema, with clear 400s.

Hand-written checks over the decoded dict: cheaper than a model round-trip on the hot path, and
each error names the exact `param` (``messages[2].content``) the way OpenAI does. Fields the
gateway does not know pass through to the upstream untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from kernel.errors import InvalidRequest
from kernel.values import Operation

Body = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def parse_json(raw: bytes) -> Body:
    if not raw:
        raise InvalidRequest("The request body is empty; expected a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc.msg} at position {exc.pos})."
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return body


def validate(op: Operation, body: Body, *, max_depth: int = 64, max_prompts: int = 128) -> Body:
    _depth(body, max_depth)
    VALIDATORS[op](body)
    if op == "completions":
        _prompt_count(body["prompt"], max_prompts)
    return body  # the `provider` preferences are parsed once, by `RequestContext.accept`


# -- nesting depth --------------------------------------------------------------
# orjson refuses to write JSON deeper than 255 levels, and a deep client schema costs the validator
# a frame per level: bodies are refused at a configured depth (server.max_json_depth) before any
# stage sees them.

PARAM_STEPS = 4  # the 400 names the path down to here (``tools[1].function.parameters``)


def _too_deep(value: Any, levels_left: int) -> list[str | int] | None:
    """The path (innermost first) to a container below `levels_left` more levels, or None."""
    if levels_left <= 0:
        return []
    if type(value) is dict:
        items: Any = value.items()
    elif type(value) is list:
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        kind = type(item)
        if kind is dict or kind is list:
            path = _too_deep(item, levels_left - 1)
            if path is not None:
                path.append(key)
                return path
    return None


def check_depth(body: Body, limit: int) -> None:
    """The nesting check alone, for bodies of other APIs before they are translated."""
    _depth(body, limit)


def _depth(body: Body, limit: int) -> None:
    path = _too_deep(body, limit)
    if path is None:
        return
    steps = path[::-1][:PARAM_STEPS]
    param = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")
    raise _fail(param, f"Invalid '{param}': the value is nested deeper than the limit of {limit} levels.")


# -- field checks -------------------------------------------------------------


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _fail(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _expect(body: Body, name: str, kinds: tuple[type, ...], label: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    # bool is an int subclass: reject True where a number is expected.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _fail(name, f"Invalid type for '{name}': expected {label}, but got {_type_name(value)}.")
    return value


def _number(body: Body, name: str, lo: float, hi: float) -> None:
    value = _expect(body, name, (int, float), "a number")
    if value is not None and not lo <= value <= hi:
        raise _fail(name, f"Invalid '{name}': {value} is out of range; expected a value from {lo} to {hi}.")


def _integer(body: Body, name: str, lo: int, hi: int | None = None) -> None:
    value = _expect(body, name, (int,), "an integer")
    if value is not None and (value < lo or (hi is not None and value > hi)):
        bound = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        raise _fail(name, f"Invalid '{name}': {value} is out of range; expected an integer {bound}.")


def _model(body: Body) -> None:
    model = body.get("model")
    if model is None:
        raise _fail("model", "Missing required parameter: 'model'.")
    if not isinstance(model, str) or not model:
        raise _fail("model", f"Invalid type for 'model': expected a non-empty string, but got {_type_name(model)}.")


def _stream(body: Body) -> None:
    _expect(body, "stream", (bool,), "a boolean")
    options = _expect(body, "stream_options", (dict,), "an object")
    if options is not None:
        if not body.get("stream"):
            raise _fail("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
        if "include_usage" in options and not isinstance(options["include_usage"], bool):
            raise _fail("stream_options.include_usage", "Invalid type for 'stream_options.include_usage': expected a boolean.")


def _stop(body: Body) -> None:
    stop = body.get("stop")
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _fail("stop", "Invalid type for 'stop': expected a string or an array of strings.")
    if len(stop) > 4:
        raise _fail("stop", "Invalid 'stop': at most 4 stop sequences are allowed.")


def _sampling(body: Body) -> None:
    _number(body, "temperature", 0, 2)
    _number(body, "top_p", 0, 1)
    _number(body, "presence_penalty", -2, 2)
    _number(body, "frequency_penalty", -2, 2)
    _integer(body, "n", 1, 128)
    _integer(body, "max_tokens", 1)
    _integer(body, "seed", -(2**63), 2**63 - 1)
    _expect(body, "logit_bias", (dict,), "an object")
    _expect(body, "user", (str,), "a string")
    _stop(body)


# -- chat -----------------------------------------------------------------------


def _message(i: int, msg: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _fail(where, f"Invalid type for '{where}': expected an object, but got {_type_name(msg)}.")
    role = msg.get("role")
    if role is None:
        raise _fail(f"{where}.role", f"Missing required parameter: '{where}.role'.")
    if role not in ROLES:
        raise _fail(
            f"{where}.role",
            f"Invalid value: '{role}'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'.",
        )
    content = msg.get("content")
    if content is None:
        if role == "assistant" and (msg.get("tool_calls") or msg.get("function_call") or "content" in msg):
            pass
        elif role != "assistant":
            raise _fail(f"{where}.content", f"Missing required parameter: '{where}.content'.")
    elif not isinstance(content, (str, list)):
        raise _fail(
            f"{where}.content",
            f"Invalid type for '{where}.content': expected a string or an array of content parts, "
            f"but got {_type_name(content)}.",
        )
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _fail(f"{where}.content[{j}]", f"Invalid '{where}.content[{j}]': expected an object with a 'type'.")
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise _fail(f"{where}.tool_call_id", f"Missing required parameter: '{where}.tool_call_id'.")
    calls = msg.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise _fail(f"{where}.tool_calls", f"Invalid type for '{where}.tool_calls': expected an array.")
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise _fail(f"{where}.tool_calls[{j}].function", f"Invalid '{where}.tool_calls[{j}]': expected a function with a name.")


def _tools(body: Body) -> set[str]:
    tools = body.get("tools")
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise _fail("tools", f"Invalid type for 'tools': expected an array, but got {_type_name(tools)}.")
    names = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _fail(f"{where}.type", f"Invalid '{where}': expected an object with type 'function'.")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _fail(f"{where}.function", f"Missing required parameter: '{where}.function'.")
        name = fn.get("name")
        if not isinstance(name, str) or not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
            raise _fail(
                f"{where}.function.name",
                f"Invalid '{where}.function.name': must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes.",
            )
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise _fail(f"{where}.function.parameters", f"Invalid type for '{where}.function.parameters': expected an object.")
        names.add(name)
    return names


def _tool_choice(body: Body, names: set[str]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _fail("tool_choice", f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.")
        if choice == "required" and not names:
            raise _fail("tool_choice", "'tool_choice' is 'required' but no 'tools' were given.")
        return
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _fail("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or a named function.")
    if fn["name"] not in names:
        raise _fail("tool_choice", f"Invalid 'tool_choice': function '{fn['name']}' is not among 'tools'.")


def _response_format(body: Body) -> None:
    fmt = _expect(body, "response_format", (dict,), "an object")
    if fmt is None:
        return
    kind = fmt.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise _fail("response_format.type", f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.")
    if kind == "json_schema" and not isinstance(fmt.get("json_schema"), dict):
        raise _fail("response_format.json_schema", "Missing required parameter: 'response_format.json_schema'.")


def validate_chat(body: Body) -> None:
    _model(body)
    messages = body.get("messages")
    if messages is None:
        raise _fail("messages", "Missing required parameter: 'messages'.")
    if not isinstance(messages, list):
        raise _fail("messages", f"Invalid type for 'messages': expected an array, but got {_type_name(messages)}.")
    if not messages:
        raise _fail("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
    for i, msg in enumerate(messages):
        _message(i, msg)
    _stream(body)
    _sampling(body)
    _integer(body, "max_completion_tokens", 1)
    _expect(body, "logprobs", (bool,), "a boolean")
    _integer(body, "top_logprobs", 0, 20)
    if body.get("top_logprobs") is not None and not body.get("logprobs"):
        raise _fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    _tool_choice(body, _tools(body))
    _expect(body, "parallel_tool_calls", (bool,), "a boolean")
    _response_format(body)


# -- completions and embeddings -----------------------------------------------------


def _prompt_like(body: Body, name: str) -> None:
    value = body.get(name)
    if value is None:
        raise _fail(name, f"Missing required parameter: '{name}'.")
    ok = (
        isinstance(value, str)
        or (isinstance(value, list) and value and all(isinstance(v, str) for v in value))
        or (isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
        or (
            isinstance(value, list)
            and value
            and all(isinstance(v, list) and v and all(isinstance(t, int) for t in v) for v in value)
        )
    )
    if not ok:
        raise _fail(
            name,
            f"Invalid '{name}': expected a string, an array of strings, an array of tokens "
            f"or an array of token arrays (non-empty).",
        )


def _prompt_count(prompt: Any, limit: int) -> None:
    """Each prompt of an array is a completion (best_of of them) charged and run: bounded."""
    if isinstance(prompt, list) and not isinstance(prompt[0], int) and len(prompt) > limit:
        raise _fail("prompt", f"Invalid 'prompt': {len(prompt)} prompts; at most {limit} are allowed in one request.")


def validate_completions(body: Body) -> None:
    _model(body)
    _prompt_like(body, "prompt")
    _stream(body)
    _sampling(body)
    _integer(body, "logprobs", 0, 20)
    _integer(body, "best_of", 1, 20)
    _expect(body, "echo", (bool,), "a boolean")
    _expect(body, "suffix", (str,), "a string")


def validate_embeddings(body: Body) -> None:
    _model(body)
    _prompt_like(body, "input")
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise _fail("encoding_format", f"Invalid value: '{fmt}'. Supported values are: 'float' and 'base64'.")
    _integer(body, "dimensions", 1)
    if body.get("stream"):
        raise _fail("stream", "Embeddings cannot be streamed.")


VALIDATORS: dict[str, Callable[[Body], None]] = {
    "chat": validate_chat,
    "completions": validate_completions,
    "embeddings": validate_embeddings,
}
