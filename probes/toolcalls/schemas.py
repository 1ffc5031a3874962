"""JSON Schemas compiled only when checking them is safe; otherwise the call is "unchecked".

A client's `tools[].function.parameters` is untrusted input, so `compile_schema`:
- never fetches: `$ref` resolves inside the schema only (`#`, `#/...`), through a `referencing`
  registry whose retrieve refuses every URI (jsonschema's default retrieves an unknown `$ref` with
  urlopen: http, https and file, with no timeout). A `$ref` elsewhere, `$id`, `$anchor`,
  `$dynamicRef` or `$recursiveRef` makes the schema unchecked;
- caps the schema's size (bytes of canonical JSON) and nesting depth;
- runs `pattern` and `patternProperties` on RE2 (linear time, so no catastrophic backtracking); a
  pattern RE2 cannot compile (backreferences, lookaround) makes the schema unchecked.
How long one check may run is bounded by the process that runs it (`probes.toolcalls.checker`).

A client's schema (`client=True`) is also unchecked when a failing call would be the client's doing,
not the endpoint's: when no arguments can satisfy it (`false`, `not: {}`, `enum: []`, contradictory
types or bounds, a root that admits no object), or when it uses a keyword that constrained decoding
(llama.cpp's, xgrammar's and outlines' JSON-schema grammars) cannot enforce (`not`, `if`, `oneOf`,
`uniqueItems`, `multipleOf`, `patternProperties`, ...). The gateway's own suite is trusted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
import re2
from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    validators,
)
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import NoSuchResource

DRAFTS = (Draft4Validator, Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator)
KNOWN_SCHEMAS = {str(d.META_SCHEMA["$schema" if "$schema" in d.META_SCHEMA else "id"]).rstrip("#"): d for d in DRAFTS}

# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
ONE = ("additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if", "then", "else",
       "unevaluatedItems", "unevaluatedProperties")  # fmt: skip
MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
NO_LOCAL_MEANING = ("$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$dynamicRef", "$recursiveRef")

# What JSON-schema grammars for constrained decoding enforce; a client's schema using any other
# validation keyword could fail on arguments the endpoint's grammar let through.
GRAMMAR_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "enum", "const", "anyOf",
    "allOf", "$ref", "$defs", "definitions", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "pattern", "format",
})  # fmt: skip
VALIDATION_KEYWORDS = frozenset(k for d in DRAFTS for k in d.VALIDATORS) | {"then", "else"}
NOT_ENFORCEABLE = VALIDATION_KEYWORDS - GRAMMAR_KEYWORDS


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    max_bytes: int = 64 * 1024  # canonical JSON of one tool's parameters
    max_depth: int = 32  # nesting levels of objects and arrays


@dataclass(frozen=True, slots=True)
class Compiled:
    """A validator, or why there is none: `unchecked` set means calls to this tool are "unchecked";
    neither set (no schema at all) means any arguments are accepted."""

    validator: Validator | None = None
    unchecked: str | None = None


ACCEPT_ANY = Compiled()


class Unchecked(Exception):
    """The schema cannot be checked safely; the message says why."""


def canonical(schema: Any) -> bytes:
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON types (a caller's object, never a parsed body)
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str).encode()


def compile_schema(schema: Any, limits: SchemaLimits, *, client: bool, key: bytes | None = None) -> Compiled:
    if schema is None or schema == {}:
        return ACCEPT_ANY
    try:
        if len(key if key is not None else canonical(schema)) > limits.max_bytes:
            raise Unchecked(f"larger than {limits.max_bytes} bytes")
        if not isinstance(schema, (dict, bool)):
            raise Unchecked("not a schema")
        _within_depth(schema, limits.max_depth)
        patterns = _checked_parts(schema, client=client)
        if client:
            _satisfiable(schema)
        draft = _draft(schema)
        draft.check_schema(schema)
        return Compiled(_with_re2(draft, patterns)(schema, registry=Registry(retrieve=_refuse)))  # type: ignore[call-arg]  # an attrs alias mypy misses
    except Unchecked as exc:
        return Compiled(unchecked=str(exc))
    except (SchemaError, ValueError, TypeError, LookupError, RecursionError) as exc:
        return Compiled(unchecked=f"invalid schema ({type(exc).__name__})")


def _refuse(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # (attrs alias) nothing outside the schema is ever fetched


def _draft(schema: Any) -> type[Validator]:
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if declared is None:
        return cast("type[Validator]", Draft7Validator)
    draft = KNOWN_SCHEMAS.get(str(declared).rstrip("#"))
    if draft is None:
        raise Unchecked("unknown $schema")
    return cast("type[Validator]", draft)


def _within_depth(value: Any, levels: int) -> None:
    if levels <= 0:
        raise Unchecked("nested too deep")
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        if isinstance(item, (dict, list)):
            _within_depth(item, levels - 1)


def subschemas(schema: Mapping[str, Any]) -> Iterator[Any]:
    """The schemas directly inside `schema` (not data such as `enum`, `const` or `default`)."""
    for key in ONE:
        value = schema.get(key)
        if isinstance(value, list):  # `items` as a list (drafts 4 to 7)
            yield from value
        elif value is not None:
            yield value
    for key in MANY:
        value = schema.get(key)
        if isinstance(value, list):
            yield from value
    for key in MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, (dict, bool)))


def _walk(schema: Any) -> Iterator[Mapping[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(subschemas(node))


def _checked_parts(schema: Any, *, client: bool) -> dict[str, Any]:
    """RE2 compilations of every pattern; raises Unchecked for non-local refs or (for a client's
    schema) a keyword no grammar enforces."""
    patterns: dict[str, Any] = {}
    for node in _walk(schema):
        for key in NO_LOCAL_MEANING:
            if key in node and not (key == "id" and not isinstance(node[key], str)):
                raise Unchecked(f"uses {key}")
        ref = node.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
            raise Unchecked("a $ref outside the schema")
        if client:
            found = NOT_ENFORCEABLE.intersection(node)
            if found:
                raise Unchecked(f"uses {sorted(found)[0]}, which constrained decoding cannot enforce")
        texts = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            texts.extend(node["patternProperties"])
        for text in texts:
            if text not in patterns:
                patterns[text] = _re2(text)
    return patterns


def _re2(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error:
        raise Unchecked("a pattern RE2 cannot run") from None


def _with_re2(draft: type[Validator], patterns: dict[str, Any]) -> Any:
    def compiled(text: str) -> Any:
        found = patterns.get(text)
        if found is None:  # reached through a $ref into data: still RE2, never `re`
            found = patterns[text] = _re2(text)
        return found

    def pattern(validator: Any, text: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and not compiled(text).search(instance):
            yield ValidationError(f"{instance!r} does not match {text!r}")

    def pattern_properties(validator: Any, props: Mapping[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for text, subschema in props.items():
            regex = compiled(text)
            for name, value in instance.items():
                if regex.search(name):
                    yield from validator.descend(value, subschema, path=name, schema_path=text)

    return validators.extend(draft, {"pattern": pattern, "patternProperties": pattern_properties})


# -- satisfiability (client schemas) ---------------------------------------------------------

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _satisfiable(schema: Any) -> None:
    if _never(schema, schema, set(), {}):
        raise Unchecked("no arguments can satisfy it")
    types = _types(schema) if isinstance(schema, dict) else None
    if types is not None and "object" not in types:
        raise Unchecked("arguments are an object, and it admits none")


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    return {t for t in names if t in JSON_TYPES}


def _meet(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    if a is None or b is None:
        return a if b is None else b
    out = a & b
    if ("number" in a and "integer" in b) or ("integer" in a and "number" in b):
        out.add("integer")
    return out


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {dict: "object", list: "array", str: "string", float: "number"}.get(type(value), "null")


def _admits(types: set[str], value: Any) -> bool:
    kind = _type_of(value)
    return kind in types or (kind == "integer" and "number" in types)


def _pointer(root: Any, ref: str) -> Any:
    node = root
    for part in ref.lstrip("#").split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _never(schema: Any, root: Any, seen: set[int], memo: dict[int, bool]) -> bool:
    """True when no value can satisfy `schema` (a conservative test: False means "maybe"). Each
    subschema is judged once (`memo`): refs can make a small schema an exponentially large tree."""
    if schema is False:
        return True
    if not isinstance(schema, dict) or id(schema) in seen:
        return False
    if id(schema) not in memo:
        memo[id(schema)] = _never_here(schema, root, seen | {id(schema)}, memo)
    return memo[id(schema)]


def _never_here(schema: dict[str, Any], root: Any, seen: set[int], memo: dict[int, bool]) -> bool:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        try:
            if _never(_pointer(root, ref), root, seen, memo):
                return True
        except (KeyError, IndexError, ValueError, TypeError):
            raise Unchecked("a $ref to nothing") from None
    if schema.get("not") in ({}, True) or schema.get("enum") == []:
        return True
    types = _types(schema)
    parts = schema.get("allOf")
    if isinstance(parts, list):
        for part in parts:
            if _never(part, root, seen, memo):
                return True
            if isinstance(part, dict):
                types = _meet(types, _types(part))
    options = schema.get("anyOf")
    if isinstance(options, list) and all(_never(o, root, seen, memo) for o in options):
        return True
    if types is not None and not types:
        return True
    if types is not None:
        if "const" in schema and not _admits(types, schema["const"]):
            return True
        if isinstance(schema.get("enum"), list) and not any(_admits(types, v) for v in schema["enum"]):
            return True
    for low, high in (("minLength", "maxLength"), ("minItems", "maxItems"), ("minimum", "maximum")):
        lo, hi = schema.get(low), schema.get(high)
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
            return True
    raw_props = schema.get("properties")
    props = raw_props if isinstance(raw_props, dict) else {}
    for name in schema.get("required") or ():
        if name in props:
            if _never(props[name], root, seen, memo):
                return True
        elif schema.get("additionalProperties") is False:
            return True
    items = schema.get("items")
    min_items = schema.get("minItems")
    needs_items = isinstance(min_items, int) and min_items >= 1 and isinstance(items, (dict, bool))
    return needs_items and _never(items, root, seen, memo)
