"""Each endpoint's daily probe budget, in requests and tokens (UTC days). Spending is recorded
whether or not a limit is set, so the dashboard and the runs can report it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class BudgetExhausted(Exception):
    """The endpoint's probe budget for today is spent."""


@dataclass(slots=True)
class Spend:
    day: int
    requests: int = 0
    tokens: int = 0


class ProbeBudget:
    def __init__(self, *, requests_per_day: int, tokens_per_day: int, clock: Callable[[], float]) -> None:
        self._max_requests = requests_per_day
        self._max_tokens = tokens_per_day
        self._clock = clock
        self._spend: dict[str, Spend] = {}

    def _today(self, endpoint_id: str) -> Spend:
        day = int(self._clock() // 86_400)
        spend = self._spend.get(endpoint_id)
        if spend is None or spend.day != day:
            spend = self._spend[endpoint_id] = Spend(day)
        return spend

    def reserve(self, endpoint_id: str) -> None:
        """Count one request; raise BudgetExhausted when today's requests or tokens are spent."""
        spend = self._today(endpoint_id)
        if self._max_requests and spend.requests >= self._max_requests:
            raise BudgetExhausted(f"{endpoint_id}: probe budget of {self._max_requests} requests/day is spent")
        if self._max_tokens and spend.tokens >= self._max_tokens:
            raise BudgetExhausted(f"{endpoint_id}: probe budget of {self._max_tokens} tokens/day is spent")
        spend.requests += 1

    def record_tokens(self, endpoint_id: str, tokens: int) -> None:
        self._today(endpoint_id).tokens += max(0, tokens)

    def spent(self, endpoint_id: str) -> Spend:
        return self._today(endpoint_id)
