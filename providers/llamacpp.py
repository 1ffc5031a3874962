"""llama-cpp-python's OpenAI-compatible server, normalised to look like OpenAI.

Its deviations (see DESIGN.md, "Normalising upstreams"):
- an assistant turn with ``content: null`` (what the SDK sends back after a tool call) gets a 500,
  so null content is sent as an empty string;
- a streamed tool call repeats its ``id``, ``type`` and ``function.name`` in every delta, which makes
  the SDK's stream helper concatenate the names; only the first delta of each call keeps them.
"""

from __future__ import annotations

from typing import Any

from providers.base import Operation, Target
from providers.openai_compat import OpenAICompatAdapter, OpenAIStreamTranslator


class LlamaCppAdapter(OpenAICompatAdapter):
    def upstream_body(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        payload = super().upstream_body(target, op, body, stream)
        messages = payload.get("messages")
        if isinstance(messages, list) and any(
            isinstance(m, dict) and "content" in m and m["content"] is None for m in messages
        ):
            payload["messages"] = [
                {**m, "content": ""} if isinstance(m, dict) and "content" in m and m["content"] is None else m
                for m in messages
            ]
        return payload

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> OpenAIStreamTranslator:
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return LlamaCppStreamTranslator(target, strip_usage=self.force_stream_usage and not wants_usage)


class LlamaCppStreamTranslator(OpenAIStreamTranslator):
    __slots__ = ("_seen_calls",)

    def __init__(self, target: Target, *, strip_usage: bool) -> None:
        super().__init__(target, strip_usage=strip_usage)
        self._seen_calls: set[tuple[int, int]] = set()

    def normalise_chunk(self, obj: dict[str, Any]) -> None:
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            if not calls:
                continue
            for call in calls:
                key = (choice.get("index", 0), call.get("index", 0))
                if key not in self._seen_calls:
                    self._seen_calls.add(key)
                    continue
                call.pop("id", None)
                call.pop("type", None)
                function = call.get("function")
                if isinstance(function, dict):
                    function.pop("name", None)
