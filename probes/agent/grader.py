"""The deterministic grader: the solution parses, calls nothing forbidden, imports and runs headless
within the time limit without an exception, shows the required behaviour, and passes the hidden
tests. It stops at the first stage that fails and says why. `run_visible` runs the public checks
for the model's `run_tests` tool and words the outcome for it.

Two sandboxes per run, joined by one socket: the solution's, where `probes.agent.driver` imports
the solution and only answers the judge's requests with plain values, and the judge's
(`probes.agent.judge`), which alone holds the checks and their expected values and decides each
check. No process that runs the solution's code decides anything, and the checks never enter it.
"""

from __future__ import annotations

import ast
import secrets
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal

from probes.agent.judge import GRACE_SECONDS, KINDS, parse_line
from probes.agent.sandbox import Sandbox, SandboxResult
from probes.agent.tasks.base import Task

Stage = Literal["file", "parse", "static", "run", "behaviour", "tests", "passed"]
DRIVER = "_driver.py"
JUDGE = "_judge.py"
MAX_TOOL_OUTPUT = 2000


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    kind: str  # import, smoke, behaviour, test
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Grade:
    task: str
    passed: bool
    stage: Stage  # the first stage that failed, or "passed"
    reason: str | None
    checks: tuple[CheckResult, ...] = ()
    failed_behaviours: tuple[str, ...] = ()
    tests_passed: int = 0
    tests_total: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)

    def breakdown(self) -> dict[str, Any]:
        return {
            "task": self.task, "passed": self.passed, "stage": self.stage, "reason": self.reason,
            "failed_behaviours": list(self.failed_behaviours),
            "tests_passed": self.tests_passed, "tests_total": self.tests_total,
        }


def forbidden_uses(tree: ast.AST, calls: frozenset[str], imports: frozenset[str]) -> list[str]:
    """Calls of these bare names (`eval(...)`, not `re.compile(...)`) and imports of these modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls:
            found.append(f"{node.func.id}() (line {node.lineno})")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"import {m} (line {node.lineno})" for m in modules if m.split(".")[0] in imports]
    return found


def expected_checks(checks_source: str) -> list[tuple[str, str]]:
    """(name as reported, kind) of every check the judge must report, read here, outside the sandboxes."""
    found = []
    for node in ast.parse(checks_source).body:
        if isinstance(node, ast.FunctionDef):
            kind = next((k for prefix, k in KINDS if node.name.startswith(prefix)), None)
            if kind is not None:
                found.append((node.name.removeprefix("behaviour_"), kind))
    return found


def _unaccounted(checks: list[CheckResult], expected: list[tuple[str, str]]) -> str | None:
    """Why the reported results are not one per expected check, or None when they are."""
    reported = [(c.name, c.kind) for c in checks if c.kind not in ("import", "done")]
    if [c.kind for c in checks].count("import") != 1 or [c.kind for c in checks].count("done") != 1:
        return "the import and the end of the run were not reported once each"
    if len(set(reported)) != len(reported):
        return "a check was reported twice (the solution printed results of its own)"
    if sorted(reported) != sorted(expected):
        return f"{len(set(reported) & set(expected))} of {len(expected)} checks were reported"
    return None


@dataclass(frozen=True, slots=True)
class CheckRun:
    checks: list[CheckResult]
    judge: SandboxResult  # the judge's run: the result lines
    solution: SandboxResult  # the solution's run: how it ended


def run_checks(task: Task, source: str, kind: str, sandbox: Sandbox) -> CheckRun:
    """Run the `hidden` or `visible` checks against `source`: the solution in one sandbox, the judge
    with the checks in another, both at once, talking over a socket pair."""
    nonce = secrets.token_hex(16)
    lim = task.limits
    # The judge outlives the solution's wall clock, to report what a killed solution left unanswered.
    judge_limits = replace(lim, wall_seconds=lim.wall_seconds + 2 * GRACE_SECONDS + 1)
    driver_source = resources.files("probes.agent").joinpath("driver.py").read_text()
    judge_source = resources.files("probes.agent").joinpath("judge.py").read_text()
    judge_end, solution_end = socket.socketpair()
    results: dict[str, SandboxResult | BaseException] = {}
    judged = threading.Event()  # the solution's run has nothing left to do once the judge is done

    def run_solution() -> None:
        try:
            results["solution"] = sandbox.run(
                {task.filename: source, DRIVER: driver_source}, DRIVER,
                args=(task.module, str(solution_end.fileno())), limits=lim,
                pass_fds=(solution_end.fileno(),), stop=judged)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, on the grader's thread
            results["solution"] = exc
        finally:
            solution_end.close()  # the judge sees the end of the link once the solution is gone

    thread = threading.Thread(target=run_solution, name=f"agent-solution-{task.name}", daemon=True)
    try:
        thread.start()
        # The checks travel on the judge's stdin, after the nonce; they never reach the solution's sandbox.
        judge = sandbox.run({JUDGE: judge_source}, JUDGE, args=(str(judge_end.fileno()),),
                            stdin=nonce + "\n" + task.checks_source(kind), limits=judge_limits,
                            pass_fds=(judge_end.fileno(),))
    finally:
        judge_end.close()  # a solution waiting on the link sees its end and exits
        thread.join(GRACE_SECONDS)
        judged.set()  # one that does not is killed
        thread.join()
    solution = results["solution"]
    if isinstance(solution, BaseException):
        raise solution
    checks = []
    for line in judge.stdout.splitlines():
        if (parsed := parse_line(line, nonce)) is not None:
            name, kind, ok, error, _ = parsed
            checks.append(CheckResult(name, kind, ok, error))
    return CheckRun(checks, judge, solution)


def _ended_early(run: CheckRun) -> str:
    if run.solution.killed_by:
        return f"the solution was killed ({run.solution.killed_by})"
    if run.judge.killed_by:
        return f"the checks were killed ({run.judge.killed_by})"
    tail = run.judge.stderr.strip().splitlines()[-1:] or ["no output"]
    return f"the checks exited with {run.judge.exit_code} before finishing: {tail[0][:300]}"


def _error(c: CheckResult, run: CheckRun) -> str:
    """A failed check's error, and what ended the solution's process when that is why it stopped answering."""
    if run.solution.killed_by and (c.error or "").startswith("SolutionGone"):
        return f"{c.error} (the solution was killed: {run.solution.killed_by})"
    return str(c.error)


def grade(task: Task, files: Mapping[str, str], sandbox: Sandbox) -> Grade:
    source = files.get(task.filename)
    if source is None:
        return Grade(task.name, False, "file", f"{task.filename} was not written")
    try:
        tree = ast.parse(source, filename=task.filename)
    except SyntaxError as exc:
        return Grade(task.name, False, "parse", f"SyntaxError: {exc.msg} (line {exc.lineno})")
    if bad := forbidden_uses(tree, task.forbidden_calls, task.forbidden_imports):
        return Grade(task.name, False, "static", "uses what the task forbids: " + ", ".join(bad))
    run = run_checks(task, source, "hidden", sandbox)
    checks = run.checks
    expected = expected_checks(task.checks_source("hidden"))
    details = {"seconds": round(max(run.judge.duration, run.solution.duration), 3),
               "killed_by": run.solution.killed_by or run.judge.killed_by}
    by_kind = {k: [c for c in checks if c.kind == k] for k in ("import", "smoke", "behaviour", "test", "done")}
    tests = by_kind["test"]
    passed_tests, total = sum(c.ok for c in tests), sum(k == "test" for _, k in expected)
    common = {"checks": tuple(checks), "tests_passed": passed_tests, "tests_total": total, "details": details}
    for c in by_kind["import"] + by_kind["smoke"]:
        if not c.ok:
            return Grade(task.name, False, "run", f"{c.kind}: {_error(c, run)}", **common)
    if not by_kind["smoke"]:
        return Grade(task.name, False, "run", _ended_early(run), **common)
    failed = tuple(c.name for c in by_kind["behaviour"] if not c.ok)
    if failed:
        why = "; ".join(f"{c.name}: {_error(c, run)}" for c in by_kind["behaviour"] if not c.ok)
        return Grade(task.name, False, "behaviour", f"behaviour missing: {why}", failed_behaviours=failed, **common)
    if not by_kind["done"]:
        return Grade(task.name, False, "run", _ended_early(run), **common)
    if (why_not := _unaccounted(checks, expected)) is not None:
        return Grade(task.name, False, "run", why_not, **common)
    if passed_tests < total:
        why = "; ".join(f"{c.name}: {_error(c, run)}" for c in tests if not c.ok)
        return Grade(task.name, False, "tests", f"{total - passed_tests}/{total} hidden tests failed: {why}", **common)
    return Grade(task.name, True, "passed", None, **common)


def run_visible(task: Task, files: Mapping[str, str], sandbox: Sandbox) -> str:
    """The `run_tests` tool: the public checks' outcome, worded for the model and capped."""
    source = files.get(task.filename)
    if source is None:
        return f"error: {task.filename} does not exist yet; write it with write_file first"
    try:
        ast.parse(source, filename=task.filename)
    except SyntaxError as exc:
        return f"error: {task.filename} does not parse: {exc.msg} (line {exc.lineno})"
    run = run_checks(task, source, "visible", sandbox)
    checks = run.checks
    lines = [f"{'PASS' if c.ok else 'FAIL'} {c.name}" + (f": {c.error}" if c.error else "")
             for c in checks if c.kind != "done"]
    if not any(c.kind == "done" for c in checks) and not any(c.kind == "import" and not c.ok for c in checks):
        lines.append(f"the test run stopped early: {_ended_early(run)}")
    ran = [c for c in checks if c.kind in ("smoke", "behaviour", "test")]
    head = f"{sum(c.ok for c in ran)} of {len(ran)} checks passed"
    return "\n".join([head, *lines])[:MAX_TOOL_OUTPUT]
