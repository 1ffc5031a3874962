"""The capability rules: what a request body needs of a deployment, and whether one has it.

One home for both callers: the resolve stage (`gateway.pipeline.resolve`), which drops the
deployments that cannot serve the body and answers a 400 naming the parameter when none can, and
the routing filters (`gateway.routing.filters`), which give each ruled-out endpoint its reason
(`gwctl route explain` shows them).
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any

from kernel.deployment import Capabilities

# (reason, detail when the deployment lacks it, else None), in the order they are checked.
Rule = tuple[str, Callable[[Capabilities], "str | None"]]


def serves(caps: Capabilities, op: str) -> bool:
    """Whether the deployment serves this operation (its `modes`)."""
    return op in caps.modes


def requested(op: str, body: dict[str, Any]) -> tuple[frozenset[str], int]:
    """The capabilities the body uses ("tools", "logprobs") and the top logprobs it asks for."""
    needs: set[str] = set()
    if body.get("tools") and body.get("tool_choice") != "none":
        needs.add("tools")
    top = 0
    if op == "chat" and body.get("logprobs"):
        needs.add("logprobs")
        top = int(body.get("top_logprobs") or 0)
    elif op == "completions" and body.get("logprobs") is not None:
        needs.add("logprobs")
        top = int(body["logprobs"])
    return frozenset(needs), top


def _tools(caps: Capabilities) -> str | None:
    return None if caps.tools else "does not support tools"


def _logprobs(caps: Capabilities) -> str | None:
    return None if caps.logprobs else "does not return logprobs"


def _top(top: int) -> Callable[[Capabilities], str | None]:
    def check(caps: Capabilities) -> str | None:
        if top <= caps.max_top_logprobs:
            return None
        return f"returns at most {caps.max_top_logprobs} top logprobs, {top} asked"

    return check


def _choices(n: int) -> Callable[[Capabilities], str | None]:
    def check(caps: Capabilities) -> str | None:
        if caps.native_n or n <= caps.max_fanout_n:
            return None
        return f"answers one choice per request, at most {caps.max_fanout_n} fanned out; {n} asked"

    return check


def rules(needs: Set[str], top: int, n: int = 1) -> list[Rule]:
    """The rules a request with these needs must pass: tools, choices (`n` > 1 without native
    `n` is one upstream request per choice, bounded), logprobs, top logprobs."""
    out: list[Rule] = []
    if "tools" in needs:
        out.append(("tools", _tools))
    if n > 1:
        out.append(("n", _choices(n)))
    if "logprobs" in needs:
        out.append(("logprobs", _logprobs))
        if top > 0:
            out.append(("top_logprobs", _top(top)))
    return out


def unmet(caps: Capabilities, needs: Set[str], top: int) -> tuple[str, str] | None:
    """The first rule these capabilities fail, as (reason, detail), or None."""
    for reason, check in rules(needs, top):
        detail = check(caps)
        if detail is not None:
            return reason, detail
    return None
