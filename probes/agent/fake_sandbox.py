"""The sandbox's fake: runs nothing, answers from a script, and records what it was asked.

`FakeSandbox.reporting(...)` answers the way `check_runner` would, echoing the nonce it reads from
the first line of stdin, so graders' callers (the agent loop, the probe) can be tested without a subprocess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

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
    def reporting(cls, checks: Sequence[tuple[str, str, bool]], *, done: bool = True) -> FakeSandbox:
        """Every run reports these (name, kind, ok) check results, as the check runner prints them."""

        def handler(call: SandboxCall) -> SandboxResult:
            nonce = call.stdin.split("\n", 1)[0].strip()
            records = [{"name": "import", "kind": "import", "ok": True, "error": None}]
            records += [{"name": n, "kind": k, "ok": ok, "error": None if ok else "AssertionError"} for n, k, ok in checks]
            if done:
                records.append({"name": "done", "kind": "done", "ok": True, "error": None})
            stdout = "".join(f"{nonce} {json.dumps(r)}\n" for r in records)
            return SandboxResult(0, False, None, stdout, "", False, 0.01)

        return cls(handler)

    def run(
        self, files: Mapping[str, str], script: str, *, args: Sequence[str] = (), stdin: str = "",
        limits: Limits | None = None,
    ) -> SandboxResult:
        call = SandboxCall(dict(files), script, tuple(args), stdin)
        self.calls.append(call)
        return self._handler(call)
