"""Tool calls for models whose chat template has none (SmolLM2, Gemma 3).

The tools are described in a system message, and the reply is generated under a GBNF grammar
built from the request's JSON schemas, so an honest endpoint's calls always parse and validate:
`tool_choice` "none" -> free text; "required" or a named function -> a call; "auto" -> text or a
call. A call is `{"name": ..., "arguments": {...}}`; with `parallel_tool_calls: true` an array
of one to `MAX_PARALLEL` of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

MAX_PARALLEL = 3
# Free text may not open like a call, so "auto" output is unambiguous.
_FREE_TEXT_RULES = 'free-text ::= [^{\\[ \\t\\n] [^\\x00]*'


class ToolRequestError(ValueError):
    """`tools` / `tool_choice` that cannot be served (the HTTP layer answers 400)."""


def chosen_tools(tools: Sequence[Mapping[str, Any]], tool_choice: object) -> tuple[list[Mapping[str, Any]], str]:
    """The tools a reply may call and the mode: "none", "auto" or "required"."""
    if not tools:
        if tool_choice not in (None, "none"):
            raise ToolRequestError("tool_choice needs tools")
        return [], "none"
    if tool_choice is None or tool_choice == "auto":
        return list(tools), "auto"
    if tool_choice in ("none", "required"):
        return (list(tools), "required") if tool_choice == "required" else ([], "none")
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        named = [t for t in tools if t["function"]["name"] == name]
        if not named:
            raise ToolRequestError(f"tool_choice names an unknown function {name!r}")
        return named, "required"
    raise ToolRequestError("tool_choice must be 'none', 'auto', 'required' or a function")


def validate_tools(tools: object) -> list[Mapping[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolRequestError("tools must be a list")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(fn, Mapping):
            raise ToolRequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        if not isinstance(fn.get("name"), str) or not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", fn["name"]):
            raise ToolRequestError(f"tools[{i}].function.name must be 1-64 letters, digits, _ or -")
        if not isinstance(fn.get("parameters", {}), Mapping):
            raise ToolRequestError(f"tools[{i}].function.parameters must be a JSON schema object")
    return tools


def tool_system_prompt(tools: Sequence[Mapping[str, Any]], mode: str) -> str:
    described = "\n".join(
        json.dumps({"name": t["function"]["name"], "description": t["function"].get("description", ""),
                    "parameters": _parameters(t)})
        for t in tools
    )
    ask = "You must call one of them." if mode == "required" else "Call one only when it helps."
    return (
        "You can call these tools:\n"
        f"{described}\n{ask} To call a tool, reply with only a JSON object: "
        '{"name": <tool name>, "arguments": {<arguments>}}'
    )


def tool_grammar(tools: Sequence[Mapping[str, Any]], mode: str, parallel: bool) -> str | None:
    """GBNF for the reply, or None for unconstrained text."""
    if mode == "none" or not tools:
        return None
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t["function"]["name"]}, "arguments": _parameters(t)},
            "required": ["name", "arguments"],
        }
        for t in tools
    ]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    schema = {"type": "array", "items": one, "minItems": 1, "maxItems": MAX_PARALLEL} if parallel else one
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # the testbed extra; not needed to serve

    grammar: str = json_schema_to_gbnf(json.dumps(schema))
    if mode == "required":
        return grammar
    renamed = re.sub(r"^root ::=", "tool-call ::=", grammar, count=1, flags=re.MULTILINE)
    return f"root ::= tool-call | free-text\n{renamed}\n{_FREE_TEXT_RULES}\n"


def parse_tool_calls(text: str, new_id: Callable[[], str]) -> list[dict[str, Any]] | None:
    """OpenAI `tool_calls` from a reply generated under `tool_grammar`, or None for text."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        # The grammar's strings admit raw control characters (a newline inside a value); the
        # arguments are re-serialised below, so the client always gets valid JSON.
        value = json.loads(stripped, strict=False)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        calls.append(
            {
                "id": new_id(),
                "type": "function",
                "function": {"name": item["name"], "arguments": json.dumps(item.get("arguments", {}))},
            }
        )
    return calls or None


def history_as_text(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Messages a template without tool roles can render: assistant calls become their JSON text,
    tool results become user turns; consecutive turns of one role are merged."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, content = m["role"], _text(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            calls = [
                json.dumps({"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"] or "{}")})
                for c in m["tool_calls"]
            ]
            content = "\n".join(filter(None, [content, *calls]))
        elif role == "tool":
            role, content = "user", f"Tool result: {content}"
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + content
        else:
            out.append({"role": role, "content": content})
    return out


def _text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # A list of content parts: keep the text ones.
    parts = cast(Iterable[object], content)
    return "".join(p.get("text", "") for p in parts if isinstance(p, Mapping))


def _parameters(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    params = tool["function"].get("parameters") or {}
    return params if params.get("properties") else {"type": "object", "properties": {}}
