"""What identifies a probe request's prompt, and the prompt size its answer reports: the records
the round's usage-consistency check (probes.consistency) compares. A leaf module: the client that
records them and the check that reads them both import it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# The body fields that can change what the endpoint tokenizes (the chat template reads tools, the
# tool choice, reasoning effort and template arguments); sampling parameters do not.
PROMPT_FIELDS = (
    "messages", "prompt", "suffix", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
    "response_format", "reasoning_effort", "chat_template_kwargs",
)


def fingerprint(payload: Mapping[str, Any]) -> str:
    """The identity of a request's prompt (its model and every field in PROMPT_FIELDS)."""
    spec = {k: payload.get(k) for k in ("model", *PROMPT_FIELDS) if payload.get(k) is not None}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reported_prompt_tokens(answer: Mapping[str, Any]) -> int | None:
    """The answer's `usage.prompt_tokens` when it is a positive integer, else None."""
    usage = answer.get("usage")
    value = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
