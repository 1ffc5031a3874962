"""The agent loop against the real local model (SmolLM2-135M on llama.cpp's server, started the way
the gateway starts it): the protocol completes within a small K. It is not expected to pass the
task; the test asserts protocol facts only."""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.config import EngineConfig
from probes.agent.loop import LoopConfig, run_agent
from probes.agent.sandbox import SubprocessSandbox
from probes.agent.tasks import tasks_named
from probes.budget import ProbeBudget
from probes.client import ProbeClient
from providers.engines.commands import llamacpp_command
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


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cfg = EngineConfig(served_model_name=MODEL, n_ctx=4096, n_threads=1, prefix_cache=False)
    port = free_port()
    log = tmp_path_factory.mktemp("agent-engine") / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(llamacpp_command(cfg, port=port, model=resolve_model(cfg), cpu_count=2),
                                cwd=REPO_ROOT, env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
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
            proc.terminate()
            proc.wait(20)


@pytest.fixture
async def client(engine_url: str) -> AsyncIterator[ProbeClient]:
    http = AiohttpClient()
    endpoint = make_endpoint("local/smollm2", model=MODEL, base_url=engine_url, adapter=LlamaCppAdapter())
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    try:
        yield ProbeClient(endpoint, http, Timeouts(connect=2, first_byte=120, between_chunks=120, total=120), budget)
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
