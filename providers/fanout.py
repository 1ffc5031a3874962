"""`n` > 1 for upstreams that ignore `n`: one request per choice, the answers merged into one.

Pure functions over OpenAI-shaped JSON (no I/O); `gateway.pipeline.fanout` sends the requests.

- `sub_bodies(body, n)`: n request bodies without `n`. A client `seed` becomes ``seed + i`` for
  choice i, so the n choices are n reproducible samples rather than one sample n times.
- `merge_bodies(parts)`: one response whose choices are the parts' choices, indexed 0..n-1 in
  order, under the first part's id; usage summed over the parts (each part's prompt is processed,
  and billed, once per part), or left out if any part lacks it: no counts are invented.
- `ChunkMerger`: streamed chunks of part i re-indexed to choice i under the first part's id; the
  parts' usage is held back and sent as one summed usage chunk at the end, when the client asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from kernel.values import Usage


def sub_bodies(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    base = {k: v for k, v in body.items() if k != "n"}
    seed = body.get("seed")
    if seed is None:
        return [base] * n
    return [base if i == 0 else {**base, "seed": seed + i} for i in range(n)]


def sum_usage(parts: Sequence[Any]) -> dict[str, Any] | None:
    """Field-wise sum of OpenAI usage objects; None if any part has none. A field (or nested
    detail) is kept only where every part reports it, so a sum never under-counts silently."""
    if not parts or not all(isinstance(p, dict) for p in parts):
        return None
    total: dict[str, Any] = {}
    for key in parts[0]:
        values = [p.get(key) for p in parts]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            total[key] = sum(values)
        elif all(isinstance(v, dict) for v in values):
            nested = sum_usage(values)
            if nested:
                total[key] = nested
    return total


def add_usages(parts: Iterable[Usage | None]) -> Usage | None:
    """The sum of the parts' usages (one request each for the same prompt); None if no part
    reported one, and a part that reported none counts neither its prompt nor its output. A part
    that counted its output but not its prompt is given a part's prompt that was counted; where none
    was, the prompt is estimated (once a part: `RequestContext.prompt_requests`).
    A part that counted no output leaves the whole's output uncounted: the accountant adds the
    estimate of those parts' text to the counted parts' sum (`gateway.pipeline.fanout`)."""
    items = list(parts)
    if all(u is None for u in items):
        return None
    usages = [u if u is not None else Usage(prompt_reported=False, completion_reported=False) for u in items]
    counted = [u for u in usages if u.prompt_reported]
    prompt = max(counted, key=lambda u: u.prompt_tokens) if counted else None
    return Usage(
        prompt_tokens=sum(u.prompt_tokens if u.prompt_reported or prompt is None else prompt.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_tokens=sum(u.cached_tokens for u in usages),
        cache_reported=all(u.cache_reported for u in usages),
        prompt_reported=bool(counted),
        completion_reported=all(u.completion_reported for u in usages),
    )


def merge_bodies(parts: Sequence[bytes]) -> tuple[bytes, dict[str, Any] | None]:
    """One client body from the parts' bodies (already in OpenAI shape), and its usage."""
    objs = [orjson.loads(p) for p in parts]
    merged = dict(objs[0])
    choices = [choice for obj in objs for choice in obj.get("choices") or ()]
    merged["choices"] = [{**choice, "index": i} for i, choice in enumerate(choices)]
    usage = sum_usage([obj.get("usage") for obj in objs])
    if usage is None:
        merged.pop("usage", None)
    else:
        merged["usage"] = usage
    return orjson.dumps(merged), usage


class ChunkMerger:
    """Rewrites each part's stream payloads into one stream of n choices."""

    __slots__ = ("_wants_usage", "_head", "_usages", "_part_usage")

    def __init__(self, *, wants_usage: bool) -> None:
        self._wants_usage = wants_usage
        self._head: dict[str, Any] | None = None  # id, object, created, model of the first chunk
        self._usages: list[Any] = []
        self._part_usage: Any = None

    def rewrite(self, payloads: Iterable[bytes], part: int) -> list[bytes]:
        out = []
        for payload in payloads:
            obj = orjson.loads(payload)
            if self._head is None:
                self._head = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
            elif "id" in self._head:
                obj["id"] = self._head["id"]
            usage = obj.pop("usage", None)
            if usage is not None:
                self._part_usage = usage
            choices = obj.get("choices")
            if not choices:
                continue  # a usage-only chunk: summed into the closing one
            for choice in choices:
                if isinstance(choice, dict):
                    choice["index"] = part + int(choice.get("index") or 0)
            out.append(orjson.dumps(obj))
        return out

    def end_part(self) -> None:
        self._usages.append(self._part_usage)
        self._part_usage = None

    def closing(self) -> list[bytes]:
        """The summed usage chunk, when the client asked for usage and every part reported it."""
        if not self._wants_usage:
            return []
        usage = sum_usage(self._usages)
        if usage is None:
            return []
        return [orjson.dumps({**(self._head or {}), "choices": [], "usage": usage})]
