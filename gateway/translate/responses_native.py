"""What a Responses request passed through (`native: [responses]`) needs around the client's body
(pure functions, no I/O).

The gateway owns Responses state, so the upstream keeps none: `upstream_body` is the client's body
with `store: false`, without `previous_response_id` and with the stored conversation put before this
turn's `input` as input items; everything else as sent. `own` makes the upstream's Response the
gateway's (its id, so retrieve and `previous_response_id` work on any replica; `store` as asked; the
public model). `carried` is the body less what the chat translation refuses, for the chat view that
routing and limits read when the request itself goes as is.
"""

from __future__ import annotations

from typing import Any

import orjson

Body = dict[str, Any]

# Input items and content parts the chat translation reads (`gateway.translate.responses_input`).
CHAT_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
CHAT_PARTS = frozenset({"input_text", "output_text", "text", "refusal", "input_image"})
# The gateway's own field of a Responses body (its `provider` preferences go at `NativeRequest.of`).
OWNED = frozenset({"previous_response_id"})


def _part(part: Any) -> Body:
    if isinstance(part, dict) and part.get("type") == "image_url":
        image = part.get("image_url") or {}
        out: Body = {"type": "input_image", "image_url": image.get("url")}
        if image.get("detail") is not None:
            out["detail"] = image["detail"]
        return out
    text = part.get("text", "") if isinstance(part, dict) else str(part)
    return {"type": "input_text", "text": text}


def items_from_chat(conversation: list[Body]) -> list[Body]:
    """A stored chat conversation (`StoredResponse.conversation`) as Responses input items."""
    items: list[Body] = []
    for message in conversation:
        role = message.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": message.get("content") or "",
                }
            )
            continue
        content = message.get("content")
        if role == "assistant":
            if content:
                items.append({"type": "message", "role": "assistant", "content": content})
            for call in message.get("tool_calls") or ():
                fn = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": fn.get("name"),
                        "arguments": fn.get("arguments", ""),
                    }
                )
            continue
        if isinstance(content, list):
            content = [_part(p) for p in content]
        items.append({"type": "message", "role": role, "content": content if content is not None else ""})
    return items


def turn_items(value: Any) -> list[Body]:
    """This turn's `input` as items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def upstream_body(body: Body, history: list[Body] | None) -> Body:
    """`history`: the stored conversation as input items (None: no `previous_response_id`)."""
    out = {k: v for k, v in body.items() if k not in OWNED}
    out["store"] = False
    if history is not None:
        out["input"] = [*history, *turn_items(body.get("input"))]
    return out


def own(response: Body, response_id: str, model: str, echo: Body) -> Body:
    """The upstream's Response as the gateway's (in place; returned for chaining)."""
    response["id"] = response_id
    response["model"] = model
    response["store"] = echo["store"]
    response["previous_response_id"] = echo["previous_response_id"]
    return response


def _carried_part(part: Any) -> bool:
    if not isinstance(part, dict):
        return True  # malformed: left for the translation to refuse
    kind = part.get("type")
    return kind in CHAT_PARTS and not (kind == "input_image" and not part.get("image_url"))


def _stand_in(part: Any, kind: str = "input_text") -> Body:
    """A part or item the chat view cannot hold, as text of its size (an input_file's base64, a hosted
    tool's call): routing's and the limits' prompt estimate stays an upper bound."""
    return {"type": kind, "text": orjson.dumps(part).decode()}


def _parts(parts: list[Any], kind: str) -> list[Any]:
    return [p if _carried_part(p) else _stand_in(p, kind) for p in parts]


def _carried_item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    if item.get("type", "message") not in CHAT_ITEMS:
        return {"type": "message", "role": "user", "content": [_stand_in(item)]}
    content = item.get("content")
    if isinstance(content, list):
        kept = _parts(content, "output_text" if item.get("role") == "assistant" else "input_text")
        item = {**item, "content": kept or [{"type": "input_text", "text": ""}]}
    if item.get("type") == "function_call_output" and isinstance(item.get("output"), list):
        item = {**item, "output": _parts(item["output"], "input_text")}
    return item


def carried(body: Body) -> Body:
    """The body less what the chat translation refuses (hosted tools and a tool_choice naming one;
    item and part kinds it does not read become text of their size, `_stand_in`): the chat view of a request passed through, for routing
    and limits only. Malformed input stays for the translation to refuse."""
    out = {k: v for k, v in body.items() if k not in ("max_tool_calls", "prompt")}
    if isinstance(tools := body.get("tools"), list):
        out["tools"] = [t for t in tools if not isinstance(t, dict) or t.get("type") == "function"]
        names = {t.get("name") for t in out["tools"] if isinstance(t, dict)}
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and (choice.get("type") != "function" or choice.get("name") not in names):
            out.pop("tool_choice")
        elif choice == "required" and not names:
            out.pop("tool_choice")
    if isinstance(value := body.get("input"), list):
        kept = [_carried_item(i) for i in value]
        out["input"] = kept or [{"type": "message", "role": "user", "content": ""}]
    return out
