"""Probe requests shaped like users': drawn from the pool with the injected RNG, so two rounds
differ and a fixed seed replays the same requests; what the statistics need stays fixed."""

from __future__ import annotations

import json

import numpy as np

from gateway.state_store.memory import MemoryStore
from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.fidelity import Fidelity
from probes.logprob_drift import LogprobDrift
from probes.settings import DriftSettings, FidelitySettings, ProbeSettings, TrafficSettings
from probes.traffic import SYSTEM_PROMPTS, USER_REQUESTS, conversation, first_token_budget
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock
from tests.probes.fakes import FakeProbeClient, ToyModel
from tests.probes.test_scheduler import FakeRunner, scheduler

SETTINGS = ProbeSettings(fidelity=FidelitySettings(samples=40), drift=DriftSettings(requests=3, permutations=100))


def _ctx(seed: int) -> ProbeContext:
    endpoint = make_endpoint("prov/m", capabilities={"max_top_logprobs": 20})
    return ProbeContext(
        endpoint=endpoint,
        client=FakeProbeClient(endpoint, ToyModel()),
        settings=SETTINGS,
        baselines=MemoryBaselines(),
        rng=np.random.default_rng(seed),
        clock=lambda: 1_000.0,
    )


def _bodies(ctx: ProbeContext) -> str:
    return json.dumps(ctx.client.bodies, sort_keys=True)  # type: ignore[attr-defined]


def test_the_pool_draws_system_prompts_turns_and_tools_at_their_shares() -> None:
    rng = np.random.default_rng(5)
    settings = TrafficSettings()
    draws = [conversation(rng, settings) for _ in range(2000)]
    system = sum(d["messages"][0]["role"] == "system" for d in draws) / len(draws)
    multi = sum(sum(m["role"] == "assistant" for m in d["messages"]) > 0 for d in draws) / len(draws)
    tools = sum("tools" in d for d in draws) / len(draws)
    assert abs(system - settings.system_share) < 0.05
    assert abs(multi - settings.history_share) < 0.05
    assert abs(tools - settings.tools_share) < 0.05
    assert all(d["messages"][-1]["role"] == "user" for d in draws)
    assert {d["messages"][-1]["content"] for d in draws} == set(USER_REQUESTS)
    assert {d["messages"][0]["content"] for d in draws if d["messages"][0]["role"] == "system"} == set(SYSTEM_PROMPTS)
    assert conversation(rng, settings, "fixed")["messages"][-1]["content"] == "fixed"
    # A probe whose statistic cannot count a tool call asks for none, whatever the share says.
    assert not any("tools" in conversation(rng, TrafficSettings(tools_share=1.0), tools=False) for _ in range(50))
    budgets = {first_token_budget(rng, settings) for _ in range(500)}
    assert budgets == set(range(1, settings.max_tokens_jitter + 2))


def test_a_seed_replays_the_same_draws() -> None:
    a = [conversation(np.random.default_rng(9), TrafficSettings()) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    others = {json.dumps(conversation(np.random.default_rng(s), TrafficSettings()), sort_keys=True) for s in range(20)}
    assert len(others) > 5


async def test_fidelity_rounds_differ_and_a_fixed_seed_reproduces_them() -> None:
    first, again, other = _ctx(1), _ctx(1), _ctx(2)
    for ctx in (first, again, other):
        await Fidelity().run(ctx)
    assert _bodies(first) == _bodies(again)
    assert _bodies(first) != _bodies(other)
    bodies = first.client.bodies  # type: ignore[attr-defined]
    # One conversation a round (the χ² is over one distribution); temperature as configured.
    assert len({json.dumps(b["messages"]) for b in bodies}) == 1
    assert {b["temperature"] for b in bodies} == {SETTINGS.fidelity.temperature}
    assert len({b["max_tokens"] for b in bodies}) > 1
    assert bodies[0]["messages"] != [{"role": "user", "content": SETTINGS.fidelity.prompt}]
    rounds = set()
    for seed in range(8):
        ctx = _ctx(100 + seed)
        await Fidelity().run(ctx)
        rounds.add(json.dumps(ctx.client.bodies[0]["messages"]))  # type: ignore[attr-defined]
    assert len(rounds) > 3


async def test_the_fixed_prompt_stays_available() -> None:
    ctx = _ctx(1)
    ctx.settings = SETTINGS.model_copy(update={"traffic": TrafficSettings(user_like=False, max_tokens_jitter=0)})
    await Fidelity().run(ctx)
    assert {json.dumps(b["messages"]) for b in ctx.client.bodies} == {  # type: ignore[attr-defined]
        json.dumps([{"role": "user", "content": SETTINGS.fidelity.prompt}])
    }
    assert {b["max_tokens"] for b in ctx.client.bodies} == {1}  # type: ignore[attr-defined]


async def test_drift_jitters_max_tokens_only_and_a_seed_reproduces_it() -> None:
    first, again, other = _ctx(3), _ctx(3), _ctx(4)
    for ctx in (first, again, other):
        await LogprobDrift().run(ctx)
    assert _bodies(first) == _bodies(again) and _bodies(first) != _bodies(other)
    bodies = first.client.bodies  # type: ignore[attr-defined]
    # The golden window is keyed by its prompts and read at T=0: those stay fixed.
    assert {b["messages"][-1]["content"] for b in bodies} == set(SETTINGS.drift.prompts)
    assert {b["temperature"] for b in bodies} == {0}


async def test_the_scheduler_s_timing_comes_from_its_injected_seed() -> None:
    def plan(seed: int) -> dict[tuple[str, str], float]:
        clock = FakeClock()
        return scheduler(FakeRunner(clock), clock, MemoryStore(clock), seed=seed).next_run

    assert plan(1) == plan(1)
    assert plan(1) != plan(2)
