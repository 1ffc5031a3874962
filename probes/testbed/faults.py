"""The fault spec an endpoint serves under, and the pure transforms that inject each fault.

A spec is a small JSON object (`{}` is honest). Keys: `substitute`, `quantize`, `quantize_tensors`,
`logit_noise`, `temperature`, `temperature_scale`, `partial`, `tool_corruption`, `truncate_prompt`, `loop`, `seed`.
Validation turns any bad key or value into one line: `FaultSpecError("fault.loop.rate: ...")`.
Every transform here is pure; randomness comes from an injected `numpy.random.Generator`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernel.frozen import Frozen

# llama.cpp's quantization types that `llama_model_quantize` can write (LLAMA_FTYPE_MOSTLY_<name>).
QUANT_TYPES = (
    "Q2_K",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_0",
    "Q4_1",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_0",
    "Q5_1",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
)

# ggml tensor types one tensor family can be re-quantized to (`quantize_tensors`).
TENSOR_TYPES = ("Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0")

ToolCorruptionKind = Literal["bad_json", "unknown_name", "missing_arg", "retyped_arg", "leak_to_content"]
TOOL_CORRUPTION_KINDS: tuple[ToolCorruptionKind, ...] = (
    "bad_json",
    "unknown_name",
    "missing_arg",
    "retyped_arg",
    "leak_to_content",
)


class FaultSpecError(ValueError):
    """A fault spec that cannot be served; the message is one line."""


class _Frozen(Frozen):
    model_config = ConfigDict(strict=True)  # merged with the base's frozen, extra="forbid"


class ToolCorruption(_Frozen):
    rate: float = Field(1.0, ge=0, le=1)
    kinds: tuple[ToolCorruptionKind, ...] = Field(TOOL_CORRUPTION_KINDS, min_length=1)


class TruncatePrompt(_Frozen):
    tokens: int = Field(gt=0)
    keep: Literal["head", "tail"] = "head"
    report: Literal["processed", "original"] = "processed"


class Loop(_Frozen):
    after_tokens: int = Field(8, ge=1)
    rate: float = Field(1.0, ge=0, le=1)
    ngram: int = Field(4, ge=1)


class QuantizeTensors(_Frozen):
    """Re-quantize only the tensors whose names match `pattern` (a regular expression searched in
    the GGUF tensor name, as llama-quantize's --tensor-type: "ffn_down", "blk\\.1[0-9]\\.attn_v")."""

    pattern: str = Field(min_length=1, max_length=64)
    type: Literal[TENSOR_TYPES]  # type: ignore[valid-type]

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class Partial(_Frozen):
    share: float = Field(ge=0, le=1)
    fault: FaultSpec


class FaultSpec(_Frozen):
    substitute: str | None = Field(None, min_length=1)
    quantize: Literal[QUANT_TYPES] | None = None  # type: ignore[valid-type]
    quantize_tensors: QuantizeTensors | None = None  # after `quantize`, if both
    logit_noise: float = Field(0.0, ge=0)
    temperature: float | None = Field(None, ge=0)
    temperature_scale: float | None = Field(None, gt=0)
    partial: Partial | None = None
    tool_corruption: ToolCorruption | None = None
    truncate_prompt: TruncatePrompt | None = None
    loop: Loop | None = None
    seed: int | None = None

    @property
    def is_honest(self) -> bool:
        return self == FaultSpec()

    def active(self) -> tuple[str, ...]:
        """The names of the faults this spec sets (not `seed`)."""
        return tuple(k for k in type(self).model_fields if k != "seed" and getattr(self, k) != getattr(HONEST, k))

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)


Partial.model_rebuild()
HONEST = FaultSpec()


def parse_fault(raw: object) -> FaultSpec:
    """A validated spec from JSON-like data; any problem is a one-line `FaultSpecError`."""
    if not isinstance(raw, Mapping):
        raise FaultSpecError(f"fault: must be a JSON object, not {type(raw).__name__}")
    try:
        # Strict mode refuses a list where a tuple is declared; JSON has only lists.
        return FaultSpec.model_validate(_lists_to_tuples(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("fault", *first["loc"]))
        value = first.get("input")
        shown = "" if first["type"] in ("missing", "extra_forbidden") else f" (got {value!r})"
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise FaultSpecError(f"{where}: {message}{shown}") from None


def _lists_to_tuples(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _lists_to_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_lists_to_tuples(v) for v in value)
    return value


def resolve_partial(spec: FaultSpec, rng: np.random.Generator) -> tuple[FaultSpec, bool]:
    """The spec one request is served under: a `partial` share of requests also get its nested
    fault (its keys win). Returns the spec (without `partial`) and whether the share was drawn."""
    if spec.partial is None:
        return spec, False
    outer = spec.model_copy(update={"partial": None})
    if rng.random() >= spec.partial.share:
        return outer, False
    inner = spec.partial.fault
    merged = outer.model_copy(update={k: getattr(inner, k) for k in inner.model_fields_set})
    return resolve_partial(merged, rng)[0], True


def logit_noise(size: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise to add to one position's logits."""
    return rng.normal(0.0, sigma, size).astype(np.float32)


def served_temperature(requested: float | None, spec: FaultSpec) -> float:
    """The temperature sampling actually uses (OpenAI's default is 1)."""
    asked = 1.0 if requested is None else requested
    if spec.temperature is not None:
        return spec.temperature
    if spec.temperature_scale is not None:
        return asked * spec.temperature_scale
    return asked


def drawn(rate: float, rng: np.random.Generator) -> bool:
    """Whether a fault applied at `rate` touches this request."""
    return rate >= 1.0 or (rate > 0.0 and bool(rng.random() < rate))


def truncate_tokens(tokens: Sequence[int], spec: TruncatePrompt) -> list[int]:
    """The prompt tokens the model sees: the first or last `spec.tokens` of them."""
    if len(tokens) <= spec.tokens:
        return list(tokens)
    return list(tokens[: spec.tokens]) if spec.keep == "head" else list(tokens[-spec.tokens :])


def reported_prompt_tokens(original: int, processed: int, spec: TruncatePrompt | None) -> int:
    if spec is not None and spec.report == "original":
        return original
    return processed


T = TypeVar("T")


def loop_tokens(generated: Sequence[T], after: int, max_tokens: int, ngram: int) -> list[T]:
    """The first `after` generated tokens, then their last `ngram` tokens repeated up to `max_tokens`."""
    head = list(generated[: min(after, max_tokens)])
    if not head:
        return []
    gram = head[-ngram:]
    return head + list(itertools.islice(itertools.cycle(gram), max_tokens - len(head)))


def corrupt_tool_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    kind: ToolCorruptionKind,
    rng: np.random.Generator,
) -> tuple[list[dict[str, Any]], str | None, str]:
    """Break a response's tool calls the way `kind` says.

    Returns (tool_calls, content, finish_reason). A kind that cannot apply to the first call
    (no argument to drop or retype) falls back to `unknown_name`, so the result is always broken.
    """
    calls = [_copy_call(c) for c in tool_calls]
    if not calls:
        raise ValueError("corrupt_tool_calls needs at least one tool call")
    if kind == "leak_to_content":
        return [], leak_to_content(calls), "stop"
    calls[0] = _break_call(calls[0], tools, kind, rng)
    return calls, None, "tool_calls"


def _copy_call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {**call, "function": dict(call["function"])}


def _break_call(
    call: dict[str, Any], tools: Sequence[Mapping[str, Any]], kind: ToolCorruptionKind, rng: np.random.Generator
) -> dict[str, Any]:
    fn = call["function"]
    if kind == "bad_json":
        # A proper prefix of a JSON object is never valid JSON.
        text = fn["arguments"]
        fn["arguments"] = text[: max(1, len(text) // 2)] if text.strip().startswith("{") else "{" + text
        return call
    args = _arguments(fn["arguments"])
    if kind in ("missing_arg", "retyped_arg") and args:
        keys = sorted(args)
        if kind == "missing_arg":
            required = [k for k in _required(tools, fn["name"]) if k in args]
            del args[str(rng.choice(required or keys))]
        else:
            key = str(rng.choice(keys))
            args[key] = _retyped(args[key])
        fn["arguments"] = json.dumps(args)
        return call
    known = {t.get("function", {}).get("name") for t in tools}
    name = f"{fn['name']}_v2"
    while name in known:
        name += "_x"
    fn["name"] = name
    return call


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _required(tools: Sequence[Mapping[str, Any]], name: str) -> list[str]:
    for tool in tools:
        fn = tool.get("function", {})
        if fn.get("name") == name:
            return list(fn.get("parameters", {}).get("required", []))
    return []


def _retyped(value: Any) -> Any:
    """A value of another JSON type: strings become numbers, everything else a string."""
    if isinstance(value, str):
        return 12345 if not value.isdigit() else [value]
    if isinstance(value, bool | int | float):
        return str(value)
    return json.dumps(value)


def leak_to_content(calls: Sequence[Mapping[str, Any]]) -> str:
    """The calls as the plain text a broken tool parser passes through."""
    parts = [
        json.dumps({"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}) for c in calls
    ]
    return "\n".join(f"<tool_call>{p}</tool_call>" for p in parts)


class Draws(BaseModel):
    """One request's random choices, drawn before it runs so they never depend on its output."""

    model_config = ConfigDict(frozen=True)

    spec: FaultSpec
    partial: bool = False
    loop: bool = False
    corruption: ToolCorruptionKind | None = None
    noise_seed: int = 0


def draw(spec: FaultSpec, rng: np.random.Generator) -> Draws:
    served, partial = resolve_partial(spec, rng)
    loop = served.loop is not None and drawn(served.loop.rate, rng)
    corruption = None
    if served.tool_corruption is not None and drawn(served.tool_corruption.rate, rng):
        corruption = served.tool_corruption.kinds[int(rng.integers(len(served.tool_corruption.kinds)))]
    return Draws(
        spec=served, partial=partial, loop=loop, corruption=corruption, noise_seed=int(rng.integers(2**63))
    )
