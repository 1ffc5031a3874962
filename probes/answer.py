"""What a probe reads of an endpoint's answer, made safe to read.

An answer is the upstream's JSON, hostile until checked. The probes read each choice (a chat
choice's `message`, a completion's `text`) and `usage`'s counts. `readable` refuses an answer
whose choices cannot be read (ValueError: the request counts as the endpoint's error) and keeps of
`usage` only the counts that are non-negative integers (12.0 read as 12): a count that is a
string, negative or fractional is one the endpoint did not report, so the probe judges the text it got instead of
failing on the count (which once ended the probe "error" and hid a looping endpoint's text).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
MAX_COUNT = 2**53  # past it a count is no count of anything a probe sent


def readable(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its `usage` cut to its valid counts (left out where it is not an object)."""
    choices = data.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not all(isinstance(c, Mapping) for c in choices):
            raise ValueError("`choices` is not a list of objects")
        if any(not isinstance(c.get("message"), Mapping | None) for c in choices):
            raise ValueError("a choice's `message` is not an object")
    answer = {k: v for k, v in data.items() if k != "usage"}
    usage = data.get("usage")
    if isinstance(usage, Mapping):
        counts = {k: _count(usage.get(k)) for k in COUNTS}
        answer["usage"] = {k: v for k, v in counts.items() if v is not None}
    return answer


def _count(value: Any) -> int | None:
    """A count as an int (12.0 is 12: some servers send JSON numbers as floats), or None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value) if abs(value) < MAX_COUNT else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT:
        return value
    return None
