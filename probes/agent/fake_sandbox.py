"""The sandbox's fake: runs nothing, answers from a script, and records what it was asked.

`FakeSandbox.reporting(...)` answers the judge's run (`probes.agent.judge`) the way the judge would,
echoing the nonce it reads from the first line of stdin, and the solution's run with nothing, so
graders' callers (the agent loop, the probe) can be tested without a subprocess.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from probes.agent.grader import JUDGE, expected_checks
from probes.agent.sandbox import Limits, SandboxResult


@dataclass(frozen=True, slots=True)
class SandboxCall:
    files: Mapping[str, str]
    script: str
    args: tuple[str, ...]
    stdin: str


Handler = Callable[[SandboxCall], SandboxResult]


class FakeSandbox:
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.calls: list[SandboxCall] = []

    @classmethod
    def reporting(cls, checks: Sequence[tuple[str, str, bool]] | None, *, done: bool = True) -> FakeSandbox:
        """Every run reports these (name, kind, ok) check results, as the judge prints them;
        with None, every check of the checks source it is sent, all passing."""

        def handler(call: SandboxCall) -> SandboxResult:
            if call.script != JUDGE:
                return SandboxResult(0, False, None, "", "", False, 0.01)
            nonce, _, checks_source = call.stdin.partition("\n")
            listed = checks if checks is not None else [(n, k, True) for n, k in expected_checks(checks_source)]
            records: list[tuple[str, str, bool, str | None]] = [("import", "import", True, None)]
            records += [(n, k, ok, None if ok else "AssertionError") for n, k, ok in listed]
            if done:
                records.append(("done", "done", True, None))
            stdout = "".join(f"{nonce} {k} {ok:d} 0.0100 {n.encode().hex()} {e.encode().hex() if e else '-'}\n"
                             for n, k, ok, e in records)
            return SandboxResult(0, False, None, stdout, "", False, 0.01)

        return cls(handler)

    def run(
        self, files: Mapping[str, str], script: str, *, args: Sequence[str] = (), stdin: str = "",
        limits: Limits | None = None, pass_fds: Sequence[int] = (), stop: threading.Event | None = None,
    ) -> SandboxResult:
        call = SandboxCall(dict(files), script, tuple(args), stdin)
        self.calls.append(call)
        return self._handler(call)
