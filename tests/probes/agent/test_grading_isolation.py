"""Attacks on the grading itself, from a wrong solution, in the real sandbox: each reaches past the
Python-level hardening (memory of its own process, interpreter state, the stream its results would
travel on, values that compare equal to anything). Each must be graded as failing, and no check
may pass for it that a wrong answer cannot pass."""

from __future__ import annotations

import json

import pytest

from probes.agent.grader import grade, run_checks
from probes.agent.sandbox import SubprocessSandbox
from probes.agent.tasks import tasks_named
from tests.probes.agent.test_grader import WRONG

# Reads every readable mapping of its own process through a path the audit hook does not refuse
# (`/dev/fd/..` is `/proc/self`), finds candidate nonces and the hidden checks' names in it, and
# prints a passing line for every check under each candidate.
READ_OWN_MEMORY = r'''import os, re
def _forge(path):
    maps = open(path + "/maps").read().splitlines()
    mem = open(path + "/mem", "rb", buffering=0)
    nonces, names = set(), set()
    for line in maps:
        fields = line.split()
        if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vdso]")):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        nonces.update(re.findall(rb"(?<![0-9a-f])([0-9a-f]{32})(?=\x00|\n)", chunk))
        names.update(re.findall(rb"^def (smoke|behaviour_\w+|test_\w+)\(m\):", chunk, re.M))
    for nonce in nonces:
        nonce = nonce.decode()
        print(nonce, "import", 1, "0.0", b"import".hex(), "-", flush=True)
        for name in sorted(n.decode() for n in names):
            kind = "smoke" if name == "smoke" else "behaviour" if name.startswith("behaviour_") else "test"
            print(nonce, kind, 1, "0.0", name.removeprefix("behaviour_").encode().hex(), "-", flush=True)
        print(nonce, "done", 1, "0.0", b"done".hex(), "-", flush=True)
    os._exit(0)
_forge(PATH)
'''

# Patches the stream its results are written on, at import time, from Python alone: its own codec
# on stdout rewrites every result line to "passed" as it is encoded.
CODEC_ON_STDOUT = r'''import codecs, sys
def _rewrite(text):
    out = []
    for line in text.split("\n"):
        f = line.split(" ")
        if len(f) == 6 and len(f[0]) == 32:
            f[2], f[5] = "1", "-"
        out.append(" ".join(f))
    return "\n".join(out).encode()
class _Encoder(codecs.IncrementalEncoder):
    def encode(self, text, final=False):
        return _rewrite(text)
def _search(name):
    if name == "forge":
        return codecs.CodecInfo(lambda s, errors="strict": (_rewrite(s), len(s)),
                                lambda b, errors="strict": (bytes(b).decode(), len(b)),
                                incrementalencoder=_Encoder, name="forge")
    return None
codecs.register(_search)
sys.stdout.reconfigure(encoding="forge")
'''

# Patches the interpreter's state at import time by writing its own memory: the `False` object's
# integer value becomes 1 (3.11: ob_size; 3.12+: lv_tag, with the same offsets), so `f"{ok:d}"`
# prints 1 for every failed check, while `False` stays falsy and itself everywhere else.
FALSE_IS_ONE = r'''import struct
with open("/dev/fd/../mem", "r+b", buffering=0) as _mem:
    _mem.seek(id(False) + 16)
    _mem.write(struct.pack("<q", 1 if __import__("sys").version_info < (3, 12) else 8))
    _mem.seek(id(False) + 24)
    _mem.write(struct.pack("<I", 1))
'''

# A wrong INI parser: it validates lines (and names the bad one) but parses nothing, and answers
# with an object whose __eq__ says yes to whatever the checks compare it with.
EQUALS_ANYTHING = '''
class _Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def parse_ini(text):
    for number, raw in enumerate(text.split("\\n"), 1):
        line = raw.strip()
        if not line or line.startswith((";", "#")):
            continue
        if line.startswith("["):
            if line.endswith("]") and line[1:-1].strip():
                continue
        elif "=" in line and line.split("=", 1)[0].strip():
            continue
        raise ValueError(f"line {number}: not a section or a key = value pair")
    return _Anything()
'''

ATTACKS = {
    "read the nonce and checks from its own memory (/dev/fd/../mem)":
        ("roman", READ_OWN_MEMORY.replace("PATH", '"/dev/fd/.."') + WRONG),
    "read the nonce and checks from its own memory (chdir /proc, self/mem)":
        ("roman", READ_OWN_MEMORY.replace("_forge(PATH)", 'os.chdir("/proc")\n_forge("self")') + WRONG),
    "rewrite its results through its own codec on stdout": ("roman", CODEC_ON_STDOUT + WRONG),
    "make False format as 1 by writing its own memory": ("roman", FALSE_IS_ONE + WRONG),
    "answer with an object that equals anything": ("ini", EQUALS_ANYTHING),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_wrong_solution_cannot_forge_a_pass(attack: str, sandbox: SubprocessSandbox) -> None:
    name, source = ATTACKS[attack]
    (task,) = tasks_named([name])
    result = grade(task, {task.filename: source}, sandbox)
    assert not result.passed, result
    # Only checks a wrong answer can pass may pass: for roman's WRONG none, for the INI validator
    # only those about rejecting malformed input.
    passed = {c.name for c in result.checks if c.ok and c.kind == "test"}
    assert passed <= {"test_error_line_number", "test_errors"}, (passed, result)


# The solution's side of the link is the solution's to change: these change it, and the judge must
# end the link (every check after fails) quickly, without believing or crashing on what it got.
HOSTILE_ANSWERS = {
    "answer 100,000 levels deep": 'import sys\n_d = sys.modules["__main__"]\n'
                                  '_d.json.dumps = lambda *a, **k: "[" * 100000 + "]" * 100000\n',
    "answer with a line longer than the cap": 'import sys\n_d = sys.modules["__main__"]\n'
                                              '_d.json.dumps = lambda *a, **k: "[" + "1," * 2000000 + "1]"\n',
    "answer with an unknown tag": 'import sys\n_d = sys.modules["__main__"]\n_real = _d.json.dumps\n'
                                  '_d.json.dumps = lambda r, **k: _real({"id": r["id"], "ok": {"pickle": "x"}})\n',
    "answer out of turn": 'import sys\n_d = sys.modules["__main__"]\n_real = _d.json.dumps\n'
                          '_d.json.dumps = lambda r, **k: _real({**r, "id": 12345})\n',
    "ignore the alarm and never answer": 'import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n'
                                        'def to_roman(n):\n    while True:\n        pass\n',
}


@pytest.mark.parametrize("attack", sorted(HOSTILE_ANSWERS))
def test_hostile_answers_end_the_link(attack: str, sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["roman"])
    source = (WRONG + HOSTILE_ANSWERS[attack]) if "never answer" in attack else (HOSTILE_ANSWERS[attack] + WRONG)
    result = grade(task, {task.filename: source}, sandbox)
    assert not result.passed and result.stage == "run" and result.tests_passed == 0, result
    if "never answer" in attack:
        assert "longer than" in (result.reason or ""), result.reason
        assert result.details["killed_by"] == "stopped", result.details  # killed once the judge was done
    else:
        assert "SolutionGone" in (result.reason or ""), result.reason
    # Every check after the first is refused at once: the run is bounded by one check's time, not by
    # the solution's wall clock (15 s) or one time limit per check.
    assert result.details["seconds"] < task.limits.wall_seconds, result.details


# Writes every request the driver reads to its own stderr, where the test can read it afterwards.
SPY = '''import sys
_d = sys.modules["__main__"]
_loads = _d.json.loads
def _spy(line, **k):
    sys.stderr.write(bytes(line).decode() if isinstance(line, (bytes, bytearray)) else line)
    return _loads(line, **k)
_d.json.loads = _spy
'''


def test_the_checks_never_reach_the_solution(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["calc"])
    source = SPY + "def evaluate(expr):\n    return 0.0\n"
    run = run_checks(task, source, "hidden", sandbox)
    seen = run.solution.stderr
    assert '"2 + 3 * 4"' in seen and not run.solution.truncated  # the spy saw the inputs, all of them
    ops = {json.loads(line)["op"] for line in seen.splitlines()}
    assert ops <= {"import", "get", "call", "calls"}, ops
    # Neither the checks' source nor their expected values: 14.0 is what "2 + 3 * 4" must give.
    assert not any(word in seen for word in ("def ", "assert", "_close", "14.0", "expected")), seen[:2000]
    # A constant 0.0 is a float, and nothing else.
    assert {c.name for c in run.checks if c.ok and c.kind in ("behaviour", "test")} == {"test_returns_float"}
