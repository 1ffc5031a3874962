"""A stand-in gateway process for the escape tests: `python -I -S gateway_harness.py CODE_DIR LIBS_DIR`
reads a JSON request on stdin, runs it through the real sandbox (or grader), and prints the outcome
as one JSON line. The tests start it as root or as an unprivileged user, with secrets in its
environment and a hidden directory as its working directory, as a deployed gateway would have.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    sys.path[:0] = list(dict.fromkeys(sys.argv[1:3]))
    from probes.agent.grader import grade
    from probes.agent.sandbox import Limits, SandboxUnavailable, SubprocessSandbox
    from probes.agent.tasks import tasks_named

    request = json.loads(sys.stdin.read())
    sandbox = SubprocessSandbox(Limits(**request.get("limits", {})))
    try:
        if "grade" in request:
            (task,) = tasks_named([request["grade"]])
            g = grade(task, {task.filename: request["source"]}, sandbox)
            out = {"passed": g.passed, "stage": g.stage, "reason": g.reason}
        else:
            r = sandbox.run({"main.py": request["code"]}, "main.py", args=request.get("args", []))
            out = {"exit_code": r.exit_code, "killed_by": r.killed_by, "timed_out": r.timed_out,
                   "stdout": r.stdout, "stderr": r.stderr}
    except SandboxUnavailable as exc:
        out = {"unavailable": str(exc)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
