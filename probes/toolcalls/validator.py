"""Classify one chat response's tool calls against the request's `tools` and `tool_choice`.

Per call (OpenRouter's buckets): `ok`, `invalid_json` (arguments do not parse as JSON),
`unknown_name` (no declared tool has that name, or `tool_choice` forbids it) or `schema_mismatch`
(JSON Schema validation against the declared `parameters`; a tool without a schema accepts anything),
plus `unchecked`: the schema cannot be checked safely, or is no evidence against the endpoint
(`probes.toolcalls.schemas`), so the arguments are not judged.
Per choice:
- `leaked`: the call was written into `content` (a JSON object naming a declared tool) while
  `finish_reason` is "stop" and there are no `tool_calls`;
- `finish_mismatch`: `tool_calls` present but `finish_reason` neither "tool_calls" nor "stop"
  (OpenAI answers "stop" to a forced call), or "tool_calls" with none; or `tool_choice`
  required/named with a clean "stop" and no call.
A choice cut short (`finish_reason` "length" or "content_filter") is not judged: the client's
`max_tokens` cut it, not the endpoint; nor is one without a finish_reason (a stream the client left). Only classes and counts leave this module, never content.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from probes.toolcalls.schemas import ACCEPT_ANY, Compiled, SchemaLimits, canonical, compile_schema

CallClass = Literal["ok", "invalid_json", "unknown_name", "schema_mismatch", "unchecked"]
CALL_CLASSES: tuple[CallClass, ...] = ("ok", "invalid_json", "unknown_name", "schema_mismatch", "unchecked")
# Every label a response can add to the counts (the Prometheus `result` label is one of these).
RESULTS = (*CALL_CLASSES, "leaked_to_content", "finish_reason_mismatch", "truncated")
NOT_BAD = frozenset({"ok", "unchecked"})
UNJUDGED_FINISH = frozenset({"length", "content_filter"})
LEAK_SCAN_CHARS = 16_384  # a leaked call sits near the start; never scan a whole essay
LEAK_SCAN_OBJECTS = 32


class SchemaCache:
    """Compiled schemas, keyed by the schema's canonical JSON (bounded LRU). `client=True` for
    schemas a client sent (see `probes.toolcalls.schemas`); the gateway's own suite is trusted."""

    def __init__(self, maxsize: int = 512, *, limits: SchemaLimits | None = None, client: bool = False) -> None:
        self._maxsize = maxsize
        self._limits = limits or SchemaLimits()
        self._client = client
        self._entries: OrderedDict[bytes, Compiled] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, schema: Any) -> Compiled:
        if schema is None or schema == {}:
            return ACCEPT_ANY
        key = canonical(schema)
        if len(key) > self._limits.max_bytes:  # not kept: a cache of huge keys would be a memory sink
            return compile_schema(schema, self._limits, client=self._client, key=key)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        compiled = compile_schema(schema, self._limits, client=self._client, key=key)
        self._entries[key] = compiled
        if len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)
        return compiled


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the validator needs from a request: declared tool schemas and the tool_choice rule."""

    schemas: Mapping[str, Any]  # name -> parameters (None when the tool declares none)
    choice: str  # "auto", "none", "required" or "named"
    forced: str | None = None  # the name tool_choice forces

    @classmethod
    def from_request(cls, body: Mapping[str, Any]) -> ToolSpec:
        schemas: dict[str, Any] = {}
        for tool in body.get("tools") or ():
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                schemas[fn["name"]] = fn.get("parameters")
        choice = body.get("tool_choice", "auto")
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return cls(schemas, "named", name if isinstance(name, str) else None)
        return cls(schemas, choice if choice in ("none", "required") else "auto")

    def allowed(self, name: str) -> bool:
        if self.choice == "none" or name not in self.schemas:
            return False
        return self.forced is None or name == self.forced


@dataclass(frozen=True, slots=True)
class ChoiceReport:
    calls: tuple[CallClass, ...] = ()
    leaked: bool = False
    finish_mismatch: bool = False
    truncated: bool = False

    @property
    def bad(self) -> bool:
        return self.leaked or self.finish_mismatch or any(c not in NOT_BAD for c in self.calls)


@dataclass(frozen=True, slots=True)
class ResponseReport:
    choices: tuple[ChoiceReport, ...]

    @property
    def bad(self) -> bool:
        """One bad call (or leak, or inconsistent finish) marks the whole response."""
        return any(c.bad for c in self.choices)

    @property
    def judged(self) -> bool:
        return any(not c.truncated for c in self.choices)

    @property
    def informative(self) -> bool:
        """Judged, and not only calls whose schema could not be checked: evidence either way."""
        return any(
            not c.truncated and (c.bad or not c.calls or any(k != "unchecked" for k in c.calls)) for c in self.choices
        )

    def counts(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.choices:
            if c.truncated:
                out["truncated"] += 1
                continue
            out.update(c.calls)
            out["leaked_to_content"] += c.leaked
            out["finish_reason_mismatch"] += c.finish_mismatch
        return +out  # drops zero counts


def classify_call(name: Any, arguments: Any, spec: ToolSpec, schemas: SchemaCache) -> CallClass:
    if isinstance(arguments, str):
        text = arguments.strip() or "{}"  # some engines send "" for a tool without parameters
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # nested past the parser's depth: no call anyone can read
            return "invalid_json"
    elif isinstance(arguments, dict):
        parsed = arguments  # a non-conforming engine sent an object: judge its content
    else:
        return "invalid_json"
    if not isinstance(name, str) or not spec.allowed(name):
        return "unknown_name"
    compiled = schemas.get(spec.schemas[name])
    if compiled.unchecked is not None:
        return "unchecked"
    if compiled.validator is None:
        return "ok"
    try:
        valid = compiled.validator.is_valid(parsed)
    except Exception:  # an unresolvable $ref, a recursion too deep: the schema's fault, not the endpoint's
        return "unchecked"
    return "ok" if valid else "schema_mismatch"


def calls_of(message: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """(name, arguments) of each call a message carries, whatever shape each has (None where unreadable)."""
    calls = message.get("tool_calls") or []
    out = []
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        out.append((fn.get("name"), fn.get("arguments")))
    return out


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "object" and isinstance(value.get("properties"), dict)


def _names_a_tool(obj: Any, names: Iterable[str]) -> bool:
    """A call: a declared name with arguments. A tool's definition echoed back (a description, or
    parameters that are a JSON schema) is not one."""
    if isinstance(obj, list):
        return any(_names_a_tool(o, names) for o in obj[:4])
    if not isinstance(obj, dict):
        return False
    fn = obj.get("function")
    holder = fn if isinstance(fn, dict) else obj
    name = holder.get("name", fn if isinstance(fn, str) else None)
    args = next((holder[k] for k in ("arguments", "parameters", "args") if k in holder), None)
    if args is None and holder is not obj:
        args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), None)
    if args is None or "description" in holder or _is_schema(args):
        return False
    return isinstance(name, str) and name in names


def leaks_call(content: Any, names: Sequence[str]) -> bool:
    """True when `content` holds a JSON object (or list of them) that names a declared tool with arguments."""
    if not isinstance(content, str) or not names:
        return False
    text = content[:LEAK_SCAN_CHARS]
    if not any(n in text for n in names):  # the cheap test first
        return False
    decoder = json.JSONDecoder()
    start, tried = 0, 0
    while tried < LEAK_SCAN_OBJECTS:
        brace = min((i for i in (text.find("{", start), text.find("[", start)) if i >= 0), default=-1)
        if brace < 0:
            return False
        tried += 1
        try:
            obj, end = decoder.raw_decode(text, brace)
        except (ValueError, RecursionError):
            start = brace + 1
            continue
        if _names_a_tool(obj, names):
            return True
        start = end
    return False


def classify_choice(
    message: Mapping[str, Any], finish_reason: Any, spec: ToolSpec, schemas: SchemaCache
) -> ChoiceReport:
    unreadable = not isinstance(finish_reason, str | None)  # a list, a number: no reason a client can read
    if not unreadable and (finish_reason is None or finish_reason in UNJUDGED_FINISH):
        return ChoiceReport(truncated=True)
    calls = tuple(classify_call(name, args, spec, schemas) for name, args in calls_of(message))
    if unreadable:
        return ChoiceReport(calls, finish_mismatch=True)
    if calls:
        mismatch = finish_reason not in ("tool_calls", "stop")
        return ChoiceReport(calls, finish_mismatch=mismatch)
    leaked = (
        finish_reason == "stop" and spec.choice != "none" and leaks_call(message.get("content"), list(spec.schemas))
    )
    forced = spec.choice in ("required", "named") and finish_reason == "stop"
    return ChoiceReport((), leaked=leaked, finish_mismatch=finish_reason == "tool_calls" or (forced and not leaked))


def classify_response(response: Mapping[str, Any], spec: ToolSpec, schemas: SchemaCache) -> ResponseReport:
    """Classify every choice of a non-streaming chat completion (or an accumulated stream)."""
    out = []
    for choice in response.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        out.append(classify_choice(message if isinstance(message, dict) else {}, choice.get("finish_reason"), spec, schemas))
    return ResponseReport(tuple(out))
