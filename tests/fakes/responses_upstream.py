"""`POST /v1/responses` of the fake OpenAI upstream (`tests.fakes.openai_upstream`), in OpenAI's wire
format: the Response object (`object: "response"`, the request's settings echoed, `usage` with
`input_tokens_details.cached_tokens`), or its SSE events, each named (`event:`) and numbered
(`sequence_number` from 0): response.created, response.in_progress, response.output_item.added,
response.content_part.added, response.output_text.delta (one per word), ...done events, and
response.completed (response.incomplete when `max_output_tokens` cut it).

It stores nothing, as a `store: false` upstream: a `previous_response_id` is a 404, as OpenAI answers
an id it does not hold. The answer echoes the last user message ("You said: "), or, with function
`tools` and a `tool_choice` of "required" or naming one, is one `function_call` item (arguments
sampled from the schema, streamed in pieces as response.function_call_arguments.delta); after a
`function_call_output` it echoes that output. Hosted tools and fields it does not know are accepted
and ignored. Faults: the model id's or the script's, as for chat
(status, reset, slow, cut:N, error-event:N — an `error` event after N events).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.fakes.openai_upstream import REPLY_PREFIX, _content_text, _error, _hang_up, _reset, _sample_arguments, _words

if TYPE_CHECKING:
    from tests.fakes.openai_upstream import FakeOpenAIUpstream


def _items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [i for i in value or () if isinstance(i, dict)]


def _text(item: dict[str, Any]) -> str:
    if item.get("type") == "function_call_output":
        return str(item.get("output"))
    return _content_text(item) if item.get("type", "message") == "message" else ""


def _chosen(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        return next((t for t in tools if t.get("name") == choice.get("name")), None)
    return tools[0] if tools and choice == "required" else None


class ResponsesAnswer:
    def __init__(self, body: dict[str, Any], upstream: FakeOpenAIUpstream) -> None:
        self.body = body
        self.id = upstream._next_id("resp").replace("-", "_")
        self.item_id = upstream._next_id("msg").replace("-", "_")
        self.created = int(time.time())
        items = _items(body.get("input"))
        words = sum(len(_words(_text(i))) + 4 for i in items)
        self.input_tokens = words + (len(_words(body["instructions"])) + 4 if body.get("instructions") else 0)
        self.cached = min(upstream.cached_tokens, self.input_tokens)
        last = next(
            (i for i in reversed(items) if i.get("role") == "user" or i.get("type") == "function_call_output"), {}
        )
        self.tokens = _words(REPLY_PREFIX + _text(last))
        self.tool = _chosen(body)
        self.call_id = upstream._next_id("call").replace("-", "_")
        self.arguments = json.dumps(_sample_arguments((self.tool or {}).get("parameters")))
        if self.tool is not None:
            self.tokens = [self.arguments[i : i + 8] for i in range(0, len(self.arguments), 8)]
        limit = body.get("max_output_tokens")
        self.cut = self.tool is None and isinstance(limit, int) and len(self.tokens) > limit
        if self.cut:
            self.tokens = self.tokens[:limit]

    def _part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def _item(self, done: bool) -> dict[str, Any]:
        status = ("incomplete" if self.cut else "completed") if done else "in_progress"
        if self.tool is not None:
            arguments = self.arguments if done else ""
            call = {"id": self.item_id, "type": "function_call", "status": status, "arguments": arguments}
            return {**call, "call_id": self.call_id, "name": self.tool["name"]}
        content = [self._part("".join(self.tokens))] if done else []
        return {"id": self.item_id, "type": "message", "status": status, "content": content, "role": "assistant"}

    def response(self, done: bool = True) -> dict[str, Any]:
        body = self.body
        status = ("incomplete" if self.cut else "completed") if done else "in_progress"
        usage = None
        if done:
            usage = {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": self.cached},
                "output_tokens": len(self.tokens),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + len(self.tokens),
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if done and self.cut else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": body.get("model"),
            "output": [self._item(True)] if done else [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": body.get("top_logprobs", 0),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def events(self) -> Iterator[dict[str, Any]]:
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        text = "".join(self.tokens)
        yield {"type": "response.created", "response": self.response(done=False)}
        yield {"type": "response.in_progress", "response": self.response(done=False)}
        yield {"type": "response.output_item.added", "output_index": 0, "item": self._item(False)}
        if self.tool is not None:
            for piece in self.tokens:
                yield {
                    "type": "response.function_call_arguments.delta",
                    "item_id": self.item_id,
                    "output_index": 0,
                    "delta": piece,
                }
            yield {
                "type": "response.function_call_arguments.done",
                "item_id": self.item_id,
                "output_index": 0,
                "arguments": text,
            }
            yield {"type": "response.output_item.done", "output_index": 0, "item": self._item(True)}
            yield {"type": "response.completed", "response": self.response()}
            return
        yield {"type": "response.content_part.added", **where, "part": self._part("")}
        for token in self.tokens:
            yield {"type": "response.output_text.delta", **where, "delta": token, "logprobs": []}
        yield {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
        yield {"type": "response.content_part.done", **where, "part": self._part(text)}
        yield {"type": "response.output_item.done", "output_index": 0, "item": self._item(True)}
        yield {"type": "response.incomplete" if self.cut else "response.completed", "response": self.response()}


def _event(seq: int, event: dict[str, Any]) -> bytes:
    data = {"type": event["type"], "sequence_number": seq, **{k: v for k, v in event.items() if k != "type"}}
    return f"event: {event['type']}\ndata: {json.dumps(data)}\n\n".encode()


async def serve_responses(upstream: FakeOpenAIUpstream, request: web.Request) -> web.StreamResponse:
    received = await upstream._receive(request)
    body = received.body
    if not isinstance(body, dict):
        return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
    if body.get("previous_response_id"):
        return _error(
            404, f"Previous response with id '{body['previous_response_id']}' not found.", "invalid_request_error"
        )
    behaviour = upstream.behaviour_for(body.get("model"))
    if behaviour.kind == "status":
        return _error(behaviour.status, f"fake upstream error {behaviour.status}", headers=behaviour.headers)
    if behaviour.kind == "reset":
        _reset(request)
        return web.Response()
    if behaviour.kind == "slow":
        await asyncio.sleep(behaviour.delay)
    answer = ResponsesAnswer(body, upstream)
    if not body.get("stream"):
        return web.json_response(answer.response())
    resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await resp.prepare(request)
    for seq, event in enumerate(answer.events()):
        if behaviour.kind in ("cut", "error-event") and seq == behaviour.after:
            if behaviour.kind == "error-event":
                error = {
                    "type": "error",
                    "code": "server_error",
                    "message": "fake upstream failed mid-stream",
                    "param": None,
                }
                await resp.write(_event(seq, error))
                await resp.write_eof()
            else:
                _hang_up(request)
            return resp
        await resp.write(_event(seq, event))
        if upstream.chunk_delay:
            await asyncio.sleep(upstream.chunk_delay)
    await resp.write_eof()
    return resp
