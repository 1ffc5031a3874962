"""A scripted chat model for the sentinel tests: it counts prompts with its own (linear) tokenizer,
retrieves a needle only if both the needle and the question survive its truncation, and answers
loop-prone prompts plainly unless a seeded draw makes it loop."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from gateway.routing.tokens import TokenCounter
from tests.probes.fakes import chat_json

PLAIN = "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday are the days."
LOOP = "and then " * 20


class FakeLM:
    def __init__(
        self, *, counter: TokenCounter, ratio: float = 1.2, overhead: int = 7, truncate: dict[str, Any] | None = None,
        loop_rate: float = 0.0, seed: int = 0, usage: bool = True,
    ) -> None:
        self.counter = counter
        self.ratio = ratio
        self.overhead = overhead
        self.truncate = truncate
        self.loop_rate = loop_rate
        self.usage = usage
        self._rng = np.random.default_rng(seed)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        text = body["messages"][-1]["content"]
        original = round(self.ratio * self.counter.count_chat(body["messages"])) + self.overhead
        seen, processed = text, original
        t = self.truncate
        if t and original > t["tokens"]:
            keep = int(len(text) * t["tokens"] / original)
            seen = text[:keep] if t["keep"] == "head" else text[-keep:]
            processed = t["tokens"]
        reported = original if t and t.get("report") == "original" else processed
        answer = self._answer(seen, body)
        out = chat_json(answer, prompt_tokens=reported, completion_tokens=len(answer.split()))
        looped = answer == LOOP
        out["choices"][0]["finish_reason"] = "length" if looped else "stop"
        if not self.usage:
            del out["usage"]
        return out

    def _answer(self, seen: str, body: dict[str, Any]) -> str:
        if "secret code" in body["messages"][-1]["content"]:
            match = re.search(r"secret code is (\d+)\.", seen)
            return match.group(1) if match and "Answer with the code only" in seen else "The river rests."
        if self.loop_rate and self._rng.random() < self.loop_rate:
            return LOOP
        return PLAIN if body.get("max_tokens", 0) > 1 else "OK"
