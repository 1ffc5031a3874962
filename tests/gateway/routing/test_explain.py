"""The `x-gateway-route` header's terms: every score term can appear, the largest first."""

from __future__ import annotations

from gateway.routing.decision import TERMS, Decision, Scored
from gateway.routing.explain import header, top_terms
from tests.fakes.catalog import make_endpoint


def scored_with_every_term() -> Scored:
    values = {name: (i + 1) * (-1 if i % 2 else 1) / 10 for i, name in enumerate(TERMS)}
    return Scored(make_endpoint("ep-a", "m"), sum(values.values()), True, **values)


def test_top_terms_covers_every_term_and_orders_by_magnitude() -> None:
    sc = scored_with_every_term()
    everything = top_terms(sc, n=len(TERMS))
    assert {name for name, _ in everything} == set(TERMS)  # a new term cannot be left out
    magnitudes = [abs(v) for _, v in everything]
    assert magnitudes == sorted(magnitudes, reverse=True)
    assert [name for name, _ in top_terms(sc)] == list(reversed(TERMS))[:3]


def test_zero_terms_are_left_out_of_the_header() -> None:
    sc = Scored(make_endpoint("ep-a", "m"), 0.25, True, ttft=0.2, cost=0.05, prompt_tokens=100, hit_tokens=50)
    assert header(Decision("score", [sc])) == "ep-a; policy=score; score=0.25; ttft=0.2; cost=0.05; hit=0.50"
