"""The agent loop: the model gets a task and the tools, the harness runs its tool calls and sends
the results back, for up to `max_steps` model turns; then the hidden grader runs.

A step is one model turn. A malformed tool call (bad JSON, unknown tool, missing argument) gets an
error message back and the loop goes on. The loop ends on a turn without tool calls (the model's
final message), after `max_steps` turns, or when the endpoint stops answering. The transcript is
kept in memory only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from probes.agent.grader import Grade, grade, run_visible
from probes.agent.sandbox import Sandbox
from probes.agent.tasks.base import Task
from probes.agent.tools import TOOLS, ToolBox, Workspace
from probes.client import ContextOverflow, ProbeUnavailable

# "context_full": the transcript outgrew the endpoint's context window; graded like "max_steps".
Stop = Literal["final", "max_steps", "context_full", "unavailable", "bad_response"]

SYSTEM = """\
You are a careful software engineer working alone in an empty directory. Solve the task below by
calling the tools: write_file writes a whole file, read_file reads one back, run_tests runs the
public tests against your file. Write the file, run the tests, fix what fails, and when you are
done reply with a short final message and no tool call. There are more tests than the public ones."""


class ChatClient(Protocol):
    """`probes.client.ProbeClient` satisfies it; tests script a fake."""

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(slots=True)
class AgentRun:
    task: str
    steps: int = 0
    stop: Stop = "max_steps"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    malformed_calls: int = 0
    finish_reasons: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    grade: Grade | None = None
    error: str | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def passed(self) -> bool:
        return self.grade is not None and self.grade.passed


@dataclass(frozen=True, slots=True)
class LoopConfig:
    max_steps: int = 8
    max_tokens: int = 1024
    temperature: float = 0.7
    seed: int | None = None


def _assistant_turn(message: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    # Content is never null: some engines reject an assistant turn whose content is null.
    turn: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if calls:
        turn["tool_calls"] = calls
    return turn


def _normalise_calls(raw: Any, step: int) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(raw if isinstance(raw, list) else []):
        call = call if isinstance(call, dict) else {}
        raw_fn = call.get("function")
        fn = raw_fn if isinstance(raw_fn, dict) else {}
        calls.append({
            "id": call.get("id") or f"call_{step}_{i}",
            "type": "function",
            "function": {"name": fn.get("name"), "arguments": fn.get("arguments")},
        })
    return calls


async def run_agent(task: Task, client: ChatClient, sandbox: Sandbox, config: LoopConfig = LoopConfig()) -> AgentRun:
    run = AgentRun(task=task.name)
    workspace = Workspace()
    tools = ToolBox(workspace, lambda files: run_visible(task, files, sandbox))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task.prompt},
    ]
    run.transcript = messages
    while run.steps < config.max_steps:
        body: dict[str, Any] = {
            "messages": list(messages), "tools": TOOLS, "tool_choice": "auto",
            "max_tokens": config.max_tokens, "temperature": config.temperature,
        }
        if config.seed is not None:
            body["seed"] = config.seed + run.steps
        run.steps += 1
        try:
            response = await client.chat(body)
        except ContextOverflow:
            if run.steps == 1:  # the task itself does not fit: the endpoint cannot be graded on it
                run.stop, run.error = "unavailable", "the task's first request exceeds the context window"
                break
            run.steps -= 1  # not a step the model took
            run.stop = "context_full"
            break
        except ProbeUnavailable as exc:
            run.stop, run.error = "unavailable", str(exc)
            break
        usage = response.get("usage") or {}
        run.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        run.completion_tokens += int(usage.get("completion_tokens") or 0)
        choices = response.get("choices") or []
        if not choices or not isinstance(choices[0].get("message"), dict):
            run.stop, run.error = "bad_response", "the response has no message"
            break
        run.finish_reasons.append(str(choices[0].get("finish_reason")))
        message = choices[0]["message"]
        calls = _normalise_calls(message.get("tool_calls"), run.steps)
        messages.append(_assistant_turn(message, calls))
        if not calls:
            run.stop = "final"
            break
        for call in calls:
            fn = call["function"]
            text, well_formed = await asyncio.to_thread(tools.call, fn["name"], fn["arguments"])
            run.tool_calls += 1
            run.malformed_calls += not well_formed
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    run.files = dict(workspace.files)
    run.grade = await asyncio.to_thread(grade, task, workspace.files, sandbox)
    return run
