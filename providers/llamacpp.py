"""llama.cpp's own server (`llama-server`), normalised to look like OpenAI.

What it still gets wrong against the official SDK (llama.cpp as vendored in llama-cpp-python
0.3.36; each is shown against the real server in tests/providers/test_llamacpp_quirks.py):
- sampling defaults are not OpenAI's: temperature 0.8, top-p 0.95, top-k 40 and min-p 0.05 when the
  request does not set them, so "the default temperature" does not sample the distribution the
  reported logprobs describe. Unless the request sets them, OpenAI's temperature 1 and top-p 1 are
  sent, with top-k and min-p off (`top_k`, `min_p` pass through);
- a named ``tool_choice`` (an object) is ignored with a warning (only strings are read), so the
  model may answer in text: it is sent as ``"required"`` with ``tools`` narrowed to that function;
- ``"required"`` lets the model write text before the call it must make, and a small model rarely
  gets there within ``max_tokens``. Where the engine's chat template is known
  (`forced_call_prefix`, the bundled engine's), the assistant turn is begun with the template's
  call opener, which llama-server continues (its assistant prefill) under the tool-call grammar;
- an assistant turn without ``content`` and without ``tool_calls`` is a 400; it is sent with ``""``;
- keep-alive: it closes a connection idle for 5 s, which a pooled client may reuse just then (the
  request then fails before an answer); each request asks for its connection to be closed after it
  (a loopback connect costs about 0.1 ms);
- ``n`` above its slot count is a 400: engine endpoints declare ``Capabilities.native_n = False``
  and dispatch fans out (`gateway.pipeline.fanout`);
- tool-call ids are 32 random letters and digits, where OpenAI's (and what clients that check or
  log them expect) begin with ``call_``: the prefix is added, the same way in every chunk of a
  stream, so the id a client echoes back in its ``tool`` message is the one it got;
- ``parallel_tool_calls: false`` does not stop a second call when the template marks each call
  (its grammar allows one or more whatever the flag says; measured with the bundled template: 8 of
  12 answers had 2-4 calls, one stream ran into ``max_tokens``, which the SDK's parse helpers
  raise on). Then only the first call is passed on, and the answer ends as ``tool_calls`` (the
  first call was whole when a second began), as OpenAI answers such a request.
Still wrong and not normalised: a tool call cut by ``max_tokens`` before its name is complete comes
back as its first characters in ``content``, and one cut inside a later call's key was seen as a
500 ("Failed to parse tool call arguments as JSON").
Everything else (usage in streams, cached tokens, logprobs from token ids with bytes, tool calls,
``json_schema``, ``max_completion_tokens``, OpenAI-shaped errors) it does as OpenAI does.

Prompt counting (`PromptCounting`, for /v1/messages/count_tokens): the chat body, as it would be
sent, is rendered by the engine's own chat template (`POST /apply-template`) and the prompt
tokenized (`POST /tokenize`, with the special tokens the engine adds to a chat prompt), which is
how llama-server counts the `prompt_tokens` of that chat request.

llama-server also serves Anthropic's Messages API itself (`/v1/messages`, its events named as
Anthropic names them, usage with ``cache_read_input_tokens``): a deployment or engine with
``native: [messages]`` gets a Messages request as the client sent it (`NativeAdapter`), with only
the sampling defaults set where the client left them (Anthropic's are OpenAI's: temperature 1, no
top-p, top-k or min-p cut), and its answer or events back as they are. Its message ids then read
``chatcmpl-...`` (llama.cpp's), not ``msg_...``. It sometimes leaves out the stream's ``message_start``:
one is put first then (`MessagesStream`).

Its `/v1/responses` is not taken as is (``native: [responses]`` is refused for this kind): its
events lack the `sequence_number`, `output_index` and `content_index` that the SDKs' stream
helpers index by, so Responses requests to llama-server are translated to chat.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from kernel.errors import ProviderRejected, ProviderServerError
from kernel.values import Operation
from providers import anthropic_native
from providers.base import ParsedBody, ParsedChunk, Target, UpstreamRequest
from providers.openai_compat import OpenAICompatAdapter, OpenAIStreamTranslator

_CALL_ID_PREFIX = "call_"

# OpenAI's sampling, where llama-server's defaults differ (its: 0.8, 0.95, 40, 0.05).
_OPENAI_SAMPLING = (("temperature", 1.0), ("top_p", 1.0), ("top_k", 0), ("min_p", 0.0))


class LlamaCppAdapter(OpenAICompatAdapter):
    def __init__(self, forced_call_prefix: str | None = None) -> None:
        # The text with which the engine's chat template opens a tool call ("<tool_call>\n").
        self.forced_call_prefix = forced_call_prefix

    def build_request(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> UpstreamRequest:
        request = super().build_request(target, op, body, stream)
        return replace(request, headers={**request.headers, "connection": "close"})

    def upstream_body(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        payload = super().upstream_body(target, op, body, stream)
        if op == "embeddings":
            return payload
        for name, value in _OPENAI_SAMPLING:
            payload.setdefault(name, value)
        messages = payload.get("messages")
        if isinstance(messages, list) and (where := _unparsable_arguments(messages)):
            # llama-server parses each earlier call's arguments to render its template and answers
            # a 500 otherwise (retried, a 502, and counted against the engine for a client's input).
            raise ProviderRejected(
                f"{where} is not valid JSON, which llama.cpp needs to render the conversation", param=where, endpoint=target.endpoint_id
            )
        if isinstance(messages, list) and any(_lacks_content(m) for m in messages):
            payload["messages"] = messages = [{**m, "content": ""} if _lacks_content(m) else m for m in messages]
        choice = payload.get("tool_choice")
        tools = payload.get("tools")
        if isinstance(choice, dict) and isinstance(tools, list):
            forced = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
            named = [t for t in tools if isinstance(t, dict) and (t.get("function") or {}).get("name") == forced]
            if named:
                payload["tools"], payload["tool_choice"] = named, "required"
        if (
            self.forced_call_prefix
            and payload.get("tool_choice") == "required"
            and payload.get("tools")
            and isinstance(messages, list)
            and not (messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant")
        ):
            payload["messages"] = [*messages, {"role": "assistant", "content": self.forced_call_prefix}]
        return payload

    def count_step(self, target: Target, body: dict[str, Any], step: int, answer: bytes | None) -> UpstreamRequest | int:
        root = target.base_url.removesuffix("/").removesuffix("/v1")  # both routes sit beside /v1
        if step == 0:
            return self._post(target, root + "/apply-template", self.upstream_body(target, "chat", body, False))
        if step == 1:
            prompt = _field(target, answer, "prompt", str)
            # As llama-server tokenizes a chat prompt: special tokens added (BOS) and parsed.
            return self._post(target, root + "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        return len(_field(target, answer, "tokens", list))

    def _post(self, target: Target, url: str, payload: dict[str, Any]) -> UpstreamRequest:
        headers = {"content-type": "application/json", "accept": "application/json", "connection": "close"}
        if target.api_key:
            headers["authorization"] = f"Bearer {target.api_key}"
        return UpstreamRequest("POST", url, {**headers, **target.extra_headers}, orjson.dumps(payload))

    def normalise_response(self, obj: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
        single = _single_call(request)
        for choice in _items(obj.get("choices")):
            if isinstance(message := choice.get("message"), dict):
                calls = message.get("tool_calls")
                _prefix_call_ids(calls)
                if single and isinstance(calls, list) and len(calls) > 1:
                    message["tool_calls"] = calls[:1]
                    choice["finish_reason"] = "tool_calls"
        return obj

    # -- Messages, passed through (providers.base.NativeAdapter) -------------------------------

    native_apis: frozenset[str] = frozenset({anthropic_native.MESSAGES})

    def takes_natively(self, api: str, body: Mapping[str, Any]) -> bool:
        """Not with `tool_choice.disable_parallel_tool_use`: llama-server ignores it, and only the
        translation holds its answer to one call (`parallel_tool_calls: false`, `_single_call`)."""
        choice = body.get("tool_choice")
        return not (isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True)

    def build_native(
        self, target: Target, api: str, body: Mapping[str, Any], stream: bool, headers: Mapping[str, str]
    ) -> UpstreamRequest:
        sampled = {**body}
        for name, value in _OPENAI_SAMPLING:
            sampled.setdefault(name, value)
        own = {"content-type": "application/json", "connection": "close"}
        if target.api_key:
            own["authorization"] = f"Bearer {target.api_key}"
        return anthropic_native.build_native(target, sampled, stream, headers, {**own, **target.extra_headers})

    def parse_native(self, target: Target, api: str, body: bytes) -> ParsedBody:
        return anthropic_native.parse_native(target, body)

    def native_stream(self, target: Target, api: str, *, prompt_hint: int = 0) -> anthropic_native.NativeStream:
        return MessagesStream(target, prompt_hint)

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> OpenAIStreamTranslator:
        translator = super().stream_translator(target, op, body)
        if isinstance(translator, LlamaCppStreamTranslator) and _single_call(body):
            translator.single_call = True
        return translator


class LlamaCppStreamTranslator(OpenAIStreamTranslator):
    __slots__ = ("single_call", "_cut")

    def __init__(self, target: Target, *, strip_usage: bool) -> None:
        super().__init__(target, strip_usage=strip_usage)
        self.single_call = False
        self._cut: set[int] = set()  # choices whose later calls were dropped

    def normalise_chunk(self, obj: dict[str, Any]) -> None:
        for choice in _items(obj.get("choices")):
            if isinstance(delta := choice.get("delta"), dict):
                _prefix_call_ids(delta.get("tool_calls"))
                if self.single_call:
                    self._keep_first_call(choice, delta)

    def _keep_first_call(self, choice: dict[str, Any], delta: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            first = [c for c in _items(calls) if c.get("index", 0) == 0]
            if len(first) < len(calls):
                self._cut.add(index)
            if first:
                delta["tool_calls"] = first
            else:
                del delta["tool_calls"]
        if index in self._cut and choice.get("finish_reason") == "length":
            choice["finish_reason"] = "tool_calls"


def _field(target: Target, answer: bytes | None, name: str, kind: type) -> Any:
    try:
        value = orjson.loads(answer or b"").get(name)
    except (orjson.JSONDecodeError, AttributeError):
        value = None
    if not isinstance(value, kind):
        raise ProviderServerError(
            f"upstream {target.endpoint_id} answered a count without a `{name}` ({kind.__name__})", endpoint=target.endpoint_id
        )
    return value


class MessagesStream(anthropic_native.NativeStream):
    """llama-server's own Messages events, as they are, but never without a beginning: it sends
    `message_start` with its first token's text, and a first token that is not a whole character
    (part of an emoji) sends none (measured straight from the engine: 5 of 150 short sampled
    streams, each opening with an emoji; none of the other 145 did), so an SDK has no message to
    add the deltas to (anthropic's `get_final_message` fails).
    One is put first then, with an id of the gateway's and the gateway's estimate of the prompt
    (`prompt_hint`, as the translated stream's message_start has it), which the client keeps: no
    event of the engine's counts the prompt then. The opening is not read as the engine's count:
    the stream reports the output's count only, and the accountant estimates the prompt."""

    def __init__(self, target: Target, prompt_hint: int = 0) -> None:
        super().__init__(target)
        self._begun = False
        self._prompt_hint = prompt_hint

    def feed(self, event: str | None, data: bytes) -> ParsedChunk:
        chunk = super().feed(event, data)
        if self._begun or not chunk.payloads:
            return chunk
        self._begun = True
        if chunk.payloads[0].startswith(b"event: message_start\n"):
            return chunk
        start = {"type": "message_start", "message": {
            "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "content": [],
            "model": self._target.upstream_model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self._prompt_hint, "output_tokens": 0}}}
        opening = b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
        return replace(chunk, payloads=[opening, *chunk.payloads])


def _items(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _single_call(request: Mapping[str, Any]) -> bool:
    return request.get("parallel_tool_calls") is False and bool(request.get("tools"))


def _prefix_call_ids(calls: Any) -> None:
    for call in _items(calls):
        call_id = call.get("id")
        if isinstance(call_id, str) and call_id and not call_id.startswith(_CALL_ID_PREFIX):
            call["id"] = _CALL_ID_PREFIX + call_id


def _unparsable_arguments(messages: list[Any]) -> str | None:
    """Where the first earlier tool call whose string arguments are not JSON is, if any."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                try:
                    orjson.loads(arguments)
                except orjson.JSONDecodeError:
                    return f"messages[{i}].tool_calls[{j}].function.arguments"
    return None


def _lacks_content(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("content") is None
        and not message.get("tool_calls")
    )


LlamaCppAdapter.translator_class = LlamaCppStreamTranslator
