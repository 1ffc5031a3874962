"""The agent loop's protocol, against a scripted chat client (and the fake sandbox where the
outcome of the checks does not matter)."""

from __future__ import annotations

import json
from typing import Any

from probes.agent.fake_sandbox import FakeSandbox
from probes.agent.loop import AgentRun, LoopConfig, run_agent
from probes.agent.tasks import tasks_named
from probes.agent.tools import TOOLS
from probes.client import ContextOverflow, ProbeUnavailable
from tests.probes.agent.conftest import solution

(ROMAN,) = tasks_named(["roman"])


def call(name: str, args: Any, call_id: str | None = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def reply(*calls: dict[str, Any], content: str | None = None, usage: tuple[int, int] = (100, 20)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}


class ScriptedClient:
    """Answers each chat request with the next scripted reply, and keeps the requests."""

    def __init__(self, *replies: dict[str, Any] | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(json.loads(json.dumps(body)))
        answer = self.replies.pop(0) if self.replies else reply(call("run_tests", {}))
        if isinstance(answer, Exception):
            raise answer
        return answer


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_write_run_tests_then_final_answer_with_the_real_sandbox(sandbox: Any) -> None:
    client = ScriptedClient(
        reply(call("write_file", {"path": "roman.py", "content": solution("roman")})),
        reply(call("run_tests", {}, "c2")),
        reply(content="Done."),
    )
    run = await run_agent(ROMAN, client, sandbox, LoopConfig(max_steps=5, max_tokens=256, seed=11))
    assert (run.stop, run.steps, run.tool_calls, run.malformed_calls) == ("final", 3, 2, 0)
    assert run.tokens == 3 * 120 and run.finish_reasons == ["tool_calls", "tool_calls", "stop"]
    assert run.passed and run.grade is not None and run.grade.stage == "passed"
    first, second, third = client.requests
    assert first["tools"] == TOOLS and first["max_tokens"] == 256 and [first["seed"], third["seed"]] == [11, 13]
    assert first["messages"][1]["content"] == ROMAN.prompt
    assert tool_messages(second) == [f"wrote {len(solution('roman'))} characters to roman.py"]
    assert tool_messages(third)[1].startswith("3 of 3 checks passed")
    # The tool results answer the calls by id, after an assistant turn whose content is never null.
    assistant = third["messages"][2]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "c1"
    assert third["messages"][3]["tool_call_id"] == "c1"


async def test_malformed_calls_get_errors_and_count_as_steps() -> None:
    sandbox = FakeSandbox.reporting([("test_a", "test", True)])
    client = ScriptedClient(
        reply(call("write_file", "{not json")),
        reply(call("delete_everything", {"path": "x"})),
        reply(call("write_file", {"path": "roman.py"})),
        reply(call("write_file", {"path": "../etc/passwd", "content": "x"})),
        reply(call("read_file", {"path": "missing.py"}, call_id=None)),
        reply(content="I give up."),
    )
    run = await run_agent(ROMAN, client, sandbox, LoopConfig(max_steps=10))
    assert (run.stop, run.steps, run.tool_calls, run.malformed_calls) == ("final", 6, 5, 3)
    errors = tool_messages(client.requests[-1])
    assert "not valid JSON" in errors[0] and "unknown tool 'delete_everything'" in errors[1]
    assert "missing argument 'content'" in errors[2] and "invalid path" in errors[3] and "no file" in errors[4]
    assert client.requests[-1]["messages"][-1]["tool_call_id"] == "call_5_0"  # an id was supplied
    assert run.grade is not None and run.grade.stage == "file" and not run.passed
    assert sandbox.calls == []  # nothing was ever written, so nothing ran


async def test_arguments_nested_past_the_recursion_limit_get_an_error_not_an_exception() -> None:
    client = ScriptedClient(reply(call("write_file", "[" * 100_000 + "]" * 100_000)), reply(content="done"))
    run = await run_agent(ROMAN, client, FakeSandbox.reporting([]), LoopConfig(max_steps=4))
    assert (run.stop, run.malformed_calls) == ("final", 1)
    assert "not valid JSON" in tool_messages(client.requests[-1])[0]


async def test_stops_after_max_steps() -> None:
    sandbox = FakeSandbox.reporting([("test_a", "test", False)])
    client = ScriptedClient(reply(call("write_file", {"path": "roman.py", "content": "x = 1\n"})))
    run = await run_agent(ROMAN, client, sandbox, LoopConfig(max_steps=4))
    assert (run.stop, run.steps, len(client.requests), run.tool_calls) == ("max_steps", 4, 4, 4)
    assert "0 of 1 checks passed" in tool_messages(client.requests[-1])[-1]
    assert run.grade is not None and not run.passed
    # Three run_tests and the grader, each a judge's run and a solution's run.
    judges = [c for c in sandbox.calls if c.script == "_judge.py"]
    solutions = [c for c in sandbox.calls if c.script == "_driver.py"]
    assert (len(judges), len(solutions), len(sandbox.calls)) == (4, 4, 8)
    # The checks travel on the judge's stdin (never as a file): the visible ones for run_tests, the
    # hidden for grading. The solution's run gets neither: no checks in its files or on its stdin.
    assert "behaviour_" not in judges[0].stdin and "behaviour_" in judges[-1].stdin
    assert all(set(c.files) == {"_judge.py"} for c in judges)
    assert all(set(c.files) == {"roman.py", "_driver.py"} and c.stdin == "" for c in solutions)


async def test_several_calls_in_one_turn_are_all_answered() -> None:
    sandbox = FakeSandbox.reporting([])
    client = ScriptedClient(
        reply(call("write_file", {"path": "roman.py", "content": "A = 1\n"}, "a"), call("read_file", {"path": "roman.py"}, "b")),
        reply(content="ok"),
    )
    run = await run_agent(ROMAN, client, sandbox, LoopConfig(max_steps=3))
    msgs = client.requests[-1]["messages"]
    assert [(m["tool_call_id"], m["content"]) for m in msgs if m["role"] == "tool"] == [
        ("a", "wrote 6 characters to roman.py"), ("b", "A = 1\n")]
    assert run.steps == 2 and run.files == {"roman.py": "A = 1\n"}


async def test_an_unavailable_endpoint_ends_the_run() -> None:
    client = ScriptedClient(reply(call("run_tests", {})), ProbeUnavailable("down", status=503))
    run = await run_agent(ROMAN, client, FakeSandbox.reporting([]), LoopConfig(max_steps=5))
    assert (run.stop, run.steps, run.error) == ("unavailable", 2, "down")


async def test_a_transcript_that_outgrows_the_context_ends_the_run_graded() -> None:
    full = ContextOverflow("ep: the maximum context length is 4096 tokens", status=400)
    client = ScriptedClient(reply(call("write_file", {"path": "roman.py", "content": "A = 1\n"})), full)
    run = await run_agent(ROMAN, client, FakeSandbox.reporting([]), LoopConfig(max_steps=5))
    # The refused request is not a step the model took; what it wrote is still graded.
    assert (run.stop, run.steps, run.error) == ("context_full", 1, None)
    assert len(client.requests) == 2 and run.files == {"roman.py": "A = 1\n"} and run.grade is not None


async def test_a_task_that_does_not_fit_at_all_is_not_graded() -> None:
    client = ScriptedClient(ContextOverflow("ep: context window exceeded", status=400))
    run = await run_agent(ROMAN, client, FakeSandbox.reporting([]), LoopConfig(max_steps=5))
    assert run.stop == "unavailable" and "context window" in (run.error or "")


async def test_a_response_without_choices_ends_the_run() -> None:
    client = ScriptedClient({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}})
    run = await run_agent(ROMAN, client, FakeSandbox.reporting([]), LoopConfig(max_steps=5))
    assert (run.stop, run.steps, run.tokens) == ("bad_response", 1, 5)


def test_agent_run_defaults() -> None:
    run = AgentRun(task="t")
    assert not run.passed and run.tokens == 0
