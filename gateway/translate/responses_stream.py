"""Chat Completions stream chunks -> the Responses API's typed event stream (no I/O).

One `ResponseStream` per streamed request: `start()` gives ``response.created`` and
``response.in_progress``; `feed()` turns each chat chunk into ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` and
``response.function_call_arguments.delta`` events; `finish()` closes every item (``.done``
events in output order) and ends with ``response.completed`` (or ``response.incomplete``) carrying
the whole response and its usage. Every event has its `sequence_number`.

Tool calls are keyed by the chat delta's `index`, so parallel calls whose deltas interleave land in
their own items; items stay open until the stream ends, when each is closed with its whole text.
A call whose name has not arrived yet is held back (its argument fragments buffered): the
``output_item.added`` event must carry the name, which the SDKs read only there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.translate.responses_input import new_id
from gateway.translate.responses_output import (
    as_text,
    call_item,
    chat_logprobs,
    envelope,
    finish,
    logprobs_from_chat,
    message_item,
    obj,
    text_part,
    usage_from_chat,
)

Body = dict[str, Any]


@dataclass(slots=True)
class _Text:
    id: str
    output_index: int
    text: list[str] = field(default_factory=list)
    logprobs: list[Body] = field(default_factory=list)


@dataclass(slots=True)
class _Call:
    id: str
    call_id: str
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    output_index: int | None = None  # None until announced (its name known)


class ResponseStream:
    def __init__(self, response_id: str, created_at: int, model: str, echo: Body, *, logprobs: bool) -> None:
        self.response = envelope(response_id, created_at, model, echo, "in_progress")
        self._logprobs = logprobs
        self._seq = 0
        self._items: list[_Text | _Call] = []  # announced, in output order
        self._text: _Text | None = None
        self._calls: dict[int, _Call] = {}
        self._finish_reason: Any = None
        self._usage: Body | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def start(self) -> bytes:
        return self._event("response.created", response=self.response) + self._event(
            "response.in_progress", response=self.response
        )

    def feed(self, chunk: Body) -> bytes:
        """The events for one chat chunk (maybe none)."""
        out: list[bytes] = []
        if chunk.get("usage") is not None:
            self._usage = usage_from_chat(chunk["usage"])
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = obj(choice.get("delta"))
            content = delta.get("content")
            if isinstance(content, str) and content:
                lp = logprobs_from_chat(chat_logprobs(choice)) if self._logprobs else []
                out.append(self._text_delta(content, lp))
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    out.extend(self._call_delta(call))
            if isinstance(choice.get("finish_reason"), str):
                self._finish_reason = choice["finish_reason"]
        return b"".join(out)

    def _text_delta(self, content: str, logprobs: list[Body]) -> bytes:
        out = b""
        text = self._text
        if text is None:
            text = self._text = _Text(new_id("msg"), len(self._items))
            self._items.append(text)
            out += self._event(
                "response.output_item.added", output_index=text.output_index, item=message_item(text.id, [], "in_progress")
            )
            out += self._event(
                "response.content_part.added",
                item_id=text.id,
                output_index=text.output_index,
                content_index=0,
                part=text_part("", [] if self._logprobs else None),
            )
        text.text.append(content)
        text.logprobs.extend(logprobs)
        return out + self._event(
            "response.output_text.delta",
            item_id=text.id,
            output_index=text.output_index,
            content_index=0,
            delta=content,
            logprobs=logprobs,
        )

    def _call_delta(self, delta: Body) -> list[bytes]:
        index = delta.get("index", 0)
        index = index if isinstance(index, int) else 0
        call_id = delta.get("id") if isinstance(delta.get("id"), str) and delta.get("id") else None
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call(new_id("fc"), call_id or new_id("call"))
        fn = obj(delta.get("function"))
        if call.output_index is None:  # names come whole in one delta at OpenAI; some send pieces
            call.name += as_text(fn.get("name"))
        fragment = fn.get("arguments")
        out: list[bytes] = []
        if call.output_index is None and call.name:
            out.append(self._announce(call))
            if call.arguments:  # what arrived before the name
                out.append(self._args_event(call, "".join(call.arguments)))
        if isinstance(fragment, str) and fragment:
            call.arguments.append(fragment)
            if call.output_index is not None:
                out.append(self._args_event(call, fragment))
        return out

    def _announce(self, call: _Call) -> bytes:
        call.output_index = len(self._items)
        self._items.append(call)
        item = call_item(call.id, call.call_id, call.name, "", "in_progress")
        return self._event("response.output_item.added", output_index=call.output_index, item=item)

    def _args_event(self, call: _Call, fragment: str) -> bytes:
        return self._event(
            "response.function_call_arguments.delta", item_id=call.id, output_index=call.output_index, delta=fragment
        )

    def finish(self) -> bytes:
        """Close every item and end with the whole response; `self.response` is final afterwards."""
        return self.close() + self.completed()

    def close(self) -> bytes:
        """Every item's closing events; `self.response` is final afterwards (and may still be
        changed, say its `store`, before `completed` sends it)."""
        out: list[bytes] = []
        for call in self._calls.values():
            if call.output_index is None:  # never named: announce it anyway, its arguments with it
                out.append(self._announce(call))
                if call.arguments:
                    out.append(self._args_event(call, "".join(call.arguments)))
        finish(self.response, self._finish_reason, self._usage)
        item_status = "incomplete" if self.response["status"] == "incomplete" else "completed"
        for item in self._items:
            if isinstance(item, _Text):
                text = "".join(item.text)
                logprobs = item.logprobs if self._logprobs else None
                part = text_part(text, logprobs)
                where = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
                out.append(self._event("response.output_text.done", **where, text=text, logprobs=logprobs or []))
                out.append(self._event("response.content_part.done", **where, part=part))
                done = message_item(item.id, [part], item_status)
            else:
                arguments = "".join(item.arguments)
                out.append(
                    self._event(
                        "response.function_call_arguments.done",
                        item_id=item.id,
                        output_index=item.output_index,
                        name=item.name,
                        arguments=arguments,
                    )
                )
                done = call_item(item.id, item.call_id, item.name, arguments, "completed")
            self.response["output"].append(done)
            out.append(self._event("response.output_item.done", output_index=item.output_index, item=done))
        return b"".join(out)

    def completed(self) -> bytes:
        """The last event: the whole response, completed or incomplete."""
        kind = "response.incomplete" if self.response["status"] == "incomplete" else "response.completed"
        return self._event(kind, response=self.response)

    def error(self, code: str | None, message: str, error_type: str, param: str | None = None) -> bytes:
        """The stream broke: an `error` event (the SDKs raise `APIError` on it), never a completion.
        It carries both Responses' flat fields and the nested `error` object the SDKs look for."""
        detail = {"message": message, "type": error_type, "param": param, "code": code}
        return self._event("error", code=code, message=message, param=param, error=detail)
