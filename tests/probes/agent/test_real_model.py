"""The agent loop against the real local model (SmolLM2-135M on llama.cpp's server, started the way
the gateway starts it): the protocol completes within a small K. It is not expected to pass the
task; the test asserts protocol facts only.

Its timeouts come from the engine's speed measured on this machine, now: a busy 2-core box can be
ten times slower than an idle one, and a fixed guess either flakes there or waits forever here."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from probes.agent.loop import SYSTEM, LoopConfig, run_agent
from probes.agent.sandbox import SubprocessSandbox
from probes.agent.tasks import tasks_named
from probes.agent.tools import TOOLS
from probes.budget import ProbeBudget
from probes.client import ProbeClient
from providers.engines.commands import llamacpp_command
from providers.engines.config import EngineConfig
from providers.engines.models import resolve_model
from providers.http import AiohttpClient, Timeouts
from providers.llamacpp import LlamaCppAdapter
from tests.engine.conftest import REPO_ROOT, child_env, free_port
from tests.fakes.catalog import make_endpoint

pytestmark = pytest.mark.engine
MODEL = "smollm2-135m-instruct"
# Two steps hold a whole tool round trip. A third could run for minutes: with tool_choice "auto"
# llama.cpp's function-calling handler ignores max_tokens, and SmolLM2 sometimes fills the context.
STEPS = 2
N_CTX = 4096
# Loading SmolLM2 takes seconds; this only bounds a start that never comes (its speed is unknown yet).
START_DEADLINE_S = 300.0
# Slack on the measured speed: the machine's load changes between the measurement and the steps.
SLACK = 4.0


@dataclass(frozen=True)
class EngineSpeed:
    prompt_s_per_token: float
    decode_s_per_token: float

    def worst_step_s(self) -> float:
        """One step at its worst: the whole context, prompt and answer, each token at the slower rate
        (llama.cpp's tool-call handler may ignore max_tokens and decode to the end of the context)."""
        return SLACK * N_CTX * max(self.prompt_s_per_token, self.decode_s_per_token) + 10.0


def _timed_completion(url: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, int, int]:
    started = time.monotonic()
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    # A calibration request's own bound: the engine answered /v1/models, so only a hung engine reaches it.
    usage = httpx.post(url + "/chat/completions", json=body, timeout=600).raise_for_status().json()["usage"]
    return time.monotonic() - started, int(usage["prompt_tokens"]), int(usage["completion_tokens"])


def measure_speed(url: str) -> EngineSpeed:
    """After a warm-up: a first-turn-sized prompt for one token (ingestion), then a short prompt that
    makes the model count (decoding). Decoding is never taken as faster than ingestion."""
    (task,) = tasks_named(["roman"])
    first_turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt + json.dumps(TOOLS)}]
    _timed_completion(url, [{"role": "user", "content": "Hi"}], 1)
    seconds, prompt_tokens, _ = _timed_completion(url, first_turn, 1)
    prompt_s = seconds / max(prompt_tokens, 1)
    seconds, prompt_tokens, decoded = _timed_completion(
        url, [{"role": "user", "content": "Count from 1 to 100, separated by spaces."}], 64)
    decode_s = max(seconds - prompt_tokens * prompt_s, 0.0) / max(decoded, 1)
    return EngineSpeed(prompt_s, max(decode_s, prompt_s))


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the engine is still busy with a long generation: never an error on top."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cfg = EngineConfig(served_model_name=MODEL, n_ctx=N_CTX, n_threads=1, prefix_cache=False)
    port = free_port()
    log = tmp_path_factory.mktemp("agent-engine") / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(llamacpp_command(cfg, port=port, model=resolve_model(cfg), cpu_count=2),
                                cwd=REPO_ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_DEADLINE_S
            while True:
                try:
                    if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, Path(log).read_text()[-3000:]
                time.sleep(0.1)
            yield url + "/v1"
        finally:
            stop(proc)


@pytest.fixture(scope="module")
def engine_speed(engine_url: str) -> EngineSpeed:
    return measure_speed(engine_url)


@pytest.fixture
async def client(engine_url: str, engine_speed: EngineSpeed) -> AsyncIterator[ProbeClient]:
    http = AiohttpClient()
    endpoint = make_endpoint("local/smollm2", model=MODEL, base_url=engine_url, adapter=LlamaCppAdapter())
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    step = engine_speed.worst_step_s()
    print(f"\nengine speed: {1 / engine_speed.prompt_s_per_token:.0f} prompt tok/s, "
          f"{1 / engine_speed.decode_s_per_token:.1f} decode tok/s; step timeout {step:.0f} s")
    try:
        yield ProbeClient(endpoint, http, Timeouts(connect=10, first_byte=step, between_chunks=step, total=step), budget)
    finally:
        await http.aclose()


async def test_the_loop_completes_its_protocol_against_the_real_model(client: ProbeClient) -> None:
    (task,) = tasks_named(["roman"])
    run = await run_agent(task, client, SubprocessSandbox(), LoopConfig(max_steps=STEPS, max_tokens=160, temperature=0.7, seed=7))
    print(f"\nreal model: stop={run.stop} steps={run.steps} tool_calls={run.tool_calls} malformed={run.malformed_calls} "
          f"tokens={run.tokens} stage={run.grade.stage if run.grade else None} passed={run.passed} "
          f"files={sorted(run.files)} finish={run.finish_reasons}")
    assert run.stop in ("final", "max_steps", "context_full") and run.error is None
    assert 1 <= run.steps <= STEPS and len(run.finish_reasons) == run.steps
    # A request refused for the context window is made but is not a step, nor an endpoint error.
    assert client.requests == run.steps + (run.stop == "context_full") and client.errors == 0
    assert run.tokens == client.tokens and run.prompt_tokens > 0
    assert run.grade is not None and run.grade.task == "roman"
    # Every assistant turn with tool calls is answered by one tool message per call, by id, in order.
    messages = run.transcript
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    i = 2
    while i < len(messages):
        turn = messages[i]
        assert turn["role"] == "assistant" and isinstance(turn["content"], str)
        ids = [c["id"] for c in turn.get("tool_calls", [])]
        answers = messages[i + 1 : i + 1 + len(ids)]
        assert [(m["role"], m["tool_call_id"]) for m in answers] == [("tool", x) for x in ids]
        i += 1 + len(ids)
    assert sum(m["role"] == "assistant" for m in messages) == run.steps
    if run.stop == "final":
        assert "tool_calls" not in messages[-1]
