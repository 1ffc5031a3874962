"""Explain how a request would be routed, without sending it (`gwctl route explain` and the admin API)."""

from __future__ import annotations

from typing import Any, get_args

from gateway.pipeline.validate import validate
from gateway.routing import explain
from gateway.routing.router import Router
from kernel.values import Operation

OPS: tuple[str, ...] = get_args(Operation)


async def explain_with(router: Router, op: str, body: dict[str, Any], key: str | None) -> tuple[dict[str, Any], str]:
    validate(op, body)  # type: ignore[arg-type]
    model = body["model"]
    candidates = router.catalog.candidates(model)
    f = router.features(op, body, key)
    await router.count_if_needed(f, body, candidates)
    decision = router.decide(candidates, f)
    doc = explain.as_dict(decision)
    doc["model"] = model
    doc["prompt_tokens"] = f.prompt_tokens
    doc["prompt_tokens_counted"] = f.exact_prompt_tokens is not None
    doc["header"] = explain.header(decision)
    rejected = router.rejection(decision, f)
    if rejected is not None:
        doc["error"] = rejected.message
    text = explain.table(decision, model=model, prompt_tokens=f.prompt_tokens, counted=f.exact_prompt_tokens is not None)
    if rejected is not None:
        text += f"\nthe gateway would answer 400: {rejected.message}"
    return doc, text
