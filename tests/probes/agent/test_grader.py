"""Each task's grader passes its known-good solution and fails each known-bad one for the right
reason (the real sandbox runs every solution)."""

from __future__ import annotations

import pytest

from probes.agent.grader import Grade, grade, run_visible
from probes.agent.sandbox import SubprocessSandbox
from probes.agent.tasks import builtin_tasks, tasks_named
from probes.agent.tasks.base import Task
from tests.probes.agent.conftest import mutate, solution

# task -> (what is wrong, the (old, new) edits that break the known-good solution, the behaviour
# that must be reported missing). For Flappy Bird: never falls, never collides, never scores.
KNOWN_BAD = {
    "flappy": [
        ("never falls", [("self.bird_vy += GRAVITY", "pass")], "falls"),
        ("never collides", [("self.over = True", "pass")], "collides_with_pipe"),
        ("never collides", [("self.over = True", "pass")], "collides_with_ground"),
        ("never scores", [("self.score += 1", "pass")], "scores"),
    ],
    "roman": [
        ("no subtractive forms", [('(900, "CM"), ', ""), ('(400, "CD"), ', ""), ('(90, "XC"), ', ""),
                                  ('(40, "XL"),\n         ', ""), ('(9, "IX"), ', ""), ('(4, "IV"), ', "")],
         "converts_to_roman"),
    ],
    "lru": [
        ("evicts first-in, not least recently used",
         [("        self._data.move_to_end(key)\n        return self._data[key]", "        return self._data[key]")],
         "evicts_least_recently_used"),
    ],
    "calc": [
        ("no operator precedence",
         [("value = self.term()", "value = self.unary()"),
          ('while self.peek() in (("op", "+"), ("op", "-")):',
           'while self.peek() in (("op", "+"), ("op", "-"), ("op", "*"), ("op", "/")):'),
          ("right = self.term()", "right = self.unary()"),
          ('value = value + right if op == "+" else value - right',
           'value = value + right if op == "+" else value - right if op == "-" else value * right '
           'if op == "*" else value / right')],
         "precedence"),
    ],
    "snake": [
        ("never grows", [("        else:\n            self.body.pop()", "        self.body.pop()")], "grows"),
    ],
    "rate_limiter": [
        ("never refills", [("self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)", "pass")],
         "refills"),
    ],
    "ini": [
        ("comments not ignored", [('if not line or line.startswith((";", "#")):', "if not line:")],
         "comments_ignored"),
    ],
}

CASES = [(task, why, edits, missing) for task, cases in KNOWN_BAD.items() for why, edits, missing in cases]


def _grade(task: Task, source: str, sandbox: SubprocessSandbox) -> Grade:
    return grade(task, {task.filename: source}, sandbox)


@pytest.mark.parametrize("task", builtin_tasks(), ids=lambda t: t.name)
def test_known_good_solution_passes(task: Task, sandbox: SubprocessSandbox) -> None:
    result = _grade(task, solution(task.name), sandbox)
    assert result.passed, result.reason
    assert result.stage == "passed" and result.tests_total >= 5 and result.tests_passed == result.tests_total
    behaviours = [c for c in result.checks if c.kind == "behaviour"]
    assert len(behaviours) >= 3 and all(c.ok for c in behaviours)


@pytest.mark.parametrize(("name", "why", "edits", "missing"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_known_bad_solution_fails_for_the_right_reason(
    name: str, why: str, edits: list[tuple[str, str]], missing: str, sandbox: SubprocessSandbox
) -> None:
    (task,) = tasks_named([name])
    result = _grade(task, mutate(solution(name), *edits), sandbox)
    assert not result.passed
    assert result.stage == "behaviour", result.reason
    assert missing in result.failed_behaviours, (why, result.failed_behaviours)


def test_every_task_has_a_known_bad_case() -> None:
    assert set(KNOWN_BAD) == {t.name for t in builtin_tasks()}


def test_missing_file_fails_first(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["roman"])
    result = grade(task, {"other.py": "x = 1"}, sandbox)
    assert (result.passed, result.stage) == (False, "file")


def test_syntax_error_fails_parse(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["flappy"])
    result = _grade(task, "class Game(:\n    pass\n", sandbox)
    assert (result.stage, result.passed) == ("parse", False) and "SyntaxError" in (result.reason or "")


def test_forbidden_call_fails_static(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["calc"])
    result = _grade(task, "def evaluate(expr):\n    return float(eval(expr))\n", sandbox)
    assert (result.stage, result.passed) == ("static", False) and "eval" in (result.reason or "")


def test_exception_at_import_fails_run(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["lru"])
    result = _grade(task, "raise RuntimeError('boom')\n", sandbox)
    assert result.stage == "run" and "RuntimeError: boom" in (result.reason or "")


def test_hanging_solution_fails_run_within_the_time_limit(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["flappy"])
    hanging = mutate(solution("flappy"), ("        if self.over:\n            return", "        while True:\n            pass"))
    result = _grade(task, hanging, sandbox)
    assert result.stage == "run" and "smoke" in (result.reason or "") and "longer than" in (result.reason or "")


def test_solution_cannot_forge_results(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["roman"])
    forged = 'import sys\nfor n in ("x", "smoke"):\n    print(\'abc {"name": "done", "kind": "done", "ok": true}\')\nsys.exit(0)\n'
    result = _grade(task, forged, sandbox)
    assert not result.passed and result.stage == "run"


def test_grading_is_deterministic(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["flappy"])
    bad = mutate(solution("flappy"), ("self.score += 1", "pass"))
    first, second = _grade(task, bad, sandbox), _grade(task, bad, sandbox)
    assert first.breakdown() == second.breakdown()


def test_run_visible_words_the_outcome(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["flappy"])
    good = run_visible(task, {task.filename: solution("flappy")}, sandbox)
    bad = run_visible(task, {task.filename: mutate(solution("flappy"), ("self.bird_vy += GRAVITY", "pass"))}, sandbox)
    assert good.startswith("4 of 4 checks passed")
    assert bad.startswith("3 of 4 checks passed") and "FAIL test_falls_without_flapping" in bad
    assert "does not exist yet" in run_visible(task, {}, sandbox)
    assert "does not parse" in run_visible(task, {task.filename: "def ("}, sandbox)


def test_hidden_checks_are_not_the_visible_ones() -> None:
    for task in builtin_tasks():
        assert task.checks_source("hidden") != task.checks_source("visible")
        assert "behaviour_" in task.checks_source("hidden")


FORGER = '''import sys
checks = sys.modules.get("_checks")
if checks is not None:
    for name in list(vars(checks)):
        if name.startswith(("smoke", "behaviour_", "test_")):
            setattr(checks, name, lambda m: None)
sys.modules["_checks"] = type(sys)("_checks")


def to_roman(n):
    return "wrong"


def from_roman(s):
    return 0
'''


def test_solution_cannot_replace_the_hidden_checks(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["roman"])
    result = _grade(task, FORGER, sandbox)
    assert not result.passed and result.stage == "behaviour" and "converts_to_roman" in (result.reason or "")
    assert result.tests_total > 0 and result.tests_passed == 0


WRONG = '''

def to_roman(n):
    return "wrong"


def from_roman(s):
    return 0
'''
# From the runner's frame: the nonce and the checks' source, then a passing line for every check.
FORGE_FROM_FRAMES = (
    'def _forge(f):\n'
    '    import os, re\n'
    '    while f is not None and "nonce" not in f.f_locals:\n'
    '        f = f.f_back\n'
    '    nonce, source = f.f_locals["nonce"], f.f_locals["checks_source"]\n'
    '    print(nonce, "import", 1, "0.0", b"import".hex(), "-", flush=True)\n'
    '    for name in re.findall(r"^def (smoke|behaviour_\\w+|test_\\w+)", source, re.M):\n'
    '        kind = "smoke" if name == "smoke" else "behaviour" if name.startswith("behaviour_") else "test"\n'
    '        print(nonce, kind, 1, "0.0", name.removeprefix("behaviour_").encode().hex(), "-", flush=True)\n'
    '    print(nonce, "done", 1, "0.0", b"done".hex(), "-", flush=True)\n'
    '    os._exit(0)\n'
)
# Swaps its own pipe in for stdout: a thread reads each result line (and so the nonce), sets it to
# passing and forwards it to the real stdout.
REDIRECT_STDOUT = r'''import os, threading
_r, _w = os.pipe()
_real = os.dup(1)
os.dup2(_w, 1)
os.close(_w)
def _pump():
    buf = b""
    while True:
        d = os.read(_r, 65536)
        if not d:
            return
        buf += d
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            f = line.split(b" ")
            if len(f) == 6:
                f[2] = b"1"; f[5] = b"-"
                line = b" ".join(f)
            os.write(_real, line + b"\n")
            if len(f) == 6 and f[1] == b"done":
                return
threading.Thread(target=_pump).start()
'''
# Reads back what the runner wrote to stdout (pread at offset 0) and writes it over as passing,
# once the last line is there; a non-daemon thread outlives the runner's main().
REWRITE_STDOUT = r'''import os, threading, time
def _rewrite():
    while True:
        lines = os.pread(1, 1 << 20, 0).split(b"\n")
        if any(len(l.split(b" ")) == 6 and l.split(b" ")[1] == b"done" for l in lines):
            break
        time.sleep(0.005)
    forged = []
    for line in lines:
        f = line.split(b" ")
        if len(f) == 6:
            f[2] = b"1"; f[5] = b"-"
        forged.append(b" ".join(f))
    new = b"\n".join(forged)
    os.pwrite(1, new, 0)
    os.ftruncate(1, len(new))
threading.Thread(target=_rewrite).start()
'''
# The same through a second open file description: /dev/stdout is /proc/self/fd/1, a path the audit
# hook lets through. A file (or, for a gateway that is not root, a pipe) reopens; a socket does not.
REOPEN_STDOUT = (REWRITE_STDOUT.replace("    while True:\n", "    out = open(\"/dev/stdout\", \"r+b\", buffering=0)\n    while True:\n")
                 .replace("os.pread(1, 1 << 20, 0)", "(out.seek(0), out.read())[1]")
                 .replace("    os.pwrite(1, new, 0)\n    os.ftruncate(1, len(new))\n",
                          "    out.seek(0)\n    out.write(new)\n    out.truncate()\n"))
assert "pread" not in REOPEN_STDOUT and "pwrite" not in REOPEN_STDOUT
# Frees fd 1 so that its own pipe's write end takes the lowest free number, then as above.
CLOSE_STDOUT = REDIRECT_STDOUT.replace("os.dup2(_w, 1)\nos.close(_w)", "os.close(1)\nassert os.dup(_w) == 1\nos.close(_w)")
# Each reaches for the grading from inside the solution's process, at import or when first called.
# They were written against the in-process check runner (`__main__` was the runner, whose frames
# held the nonce); now `__main__` is the driver, which holds neither checks nor nonce, and they
# stay as regression tests. test_grading_isolation.py has the attacks that beat that runner.
ATTACKS = {
    "patch the runner": 'import sys\nrunner = sys.modules["__main__"]\nfor name in list(vars(runner)):\n'
                        '    if callable(getattr(runner, name)) and not isinstance(getattr(runner, name), type):\n'
                        '        setattr(runner, name, lambda *a, **k: (True, None, 0.0))\n',
    "patch the builtins": 'import builtins\nbuiltins.range = lambda *a: []\nbuiltins.all = lambda *a: True\n'
                          'builtins.any = lambda *a: True\n',
    "patch the modules": 'import json, time, signal\njson.dumps = lambda *a, **k: \'{"ok": true}\'\n'
                         'signal.setitimer = lambda *a: 0\n',
    "walk the frames": 'import sys\n' + FORGE_FROM_FRAMES + '_forge(sys._getframe())\n',
    "walk a traceback": 'import sys\n' + FORGE_FROM_FRAMES + 'try:\n    raise ValueError\nexcept ValueError as e:\n'
                        '    _forge(e.__traceback__.tb_frame)\n',
    "switch off the hook": 'import sys\nrunner = sys.modules["__main__"]\nrunner.REFUSED_EVENTS = frozenset()\n'
                           'runner.FRAME_ATTRIBUTES = frozenset()\n' + FORGE_FROM_FRAMES + '_forge(sys._getframe())\n',
    "catch a signal's frame": 'import os, signal\n' + FORGE_FROM_FRAMES +
                              'signal.signal(signal.SIGUSR1, lambda sig, frame: _forge(frame))\n'
                              'os.kill(os.getpid(), signal.SIGUSR1)\n',
    "recreate the signal module": 'import importlib, importlib._bootstrap as boot\n' + FORGE_FROM_FRAMES +
                                  'for make in (lambda: importlib.import_module("_signal"), '
                                  'lambda: boot._builtin_from_name("_signal")):\n'
                                  '    try:\n        s = make()\n        break\n    except Exception:\n        s = None\n'
                                  'if s is not None:\n    import os\n'
                                  '    s.signal(s.SIGUSR1, lambda sig, frame: _forge(frame))\n    os.kill(os.getpid(), s.SIGUSR1)\n',
    "redirect stdout through a pipe": REDIRECT_STDOUT,
    "close stdout and take its number": CLOSE_STDOUT,
    "read back and rewrite stdout": REWRITE_STDOUT,
    "reopen stdout and rewrite it": REOPEN_STDOUT,
    "re-read stdin": 'import os\nfor path in ("/proc/self/fd/0", "/proc/1/fd/0"):\n    try:\n        nonce = open(path).readline().strip()\n'
                     '    except OSError:\n        continue\n    if nonce:\n'
                     '        print(nonce, "done", 1, "0.0", b"done".hex(), "-", flush=True)\n        os._exit(0)\n',
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_solution_cannot_forge_its_grade(attack: str, sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["roman"])
    result = _grade(task, ATTACKS[attack] + WRONG, sandbox)
    assert not result.passed and result.tests_passed == 0, result


GLOBALS_THIEF = '''
class TokenBucket:
    def __init__(self, rate, capacity, clock):
        # Through an object the checks handed over, reach their globals and patch a helper.
        for attr in ("__call__", "__init__"):
            g = getattr(getattr(type(clock), attr, None), "__globals__", None)
            if g is not None and "_close" in g:
                g["_close"] = lambda a, b: True
        self.clock = clock

    def allow(self, cost=1.0):
        return False

    def available(self):
        return 0.0
'''


def test_solution_cannot_reach_the_checks_globals(sandbox: SubprocessSandbox) -> None:
    (task,) = tasks_named(["rate_limiter"])
    result = _grade(task, GLOBALS_THIEF, sandbox)
    assert not result.passed and result.tests_passed == 0, result


def test_checks_do_not_use_modules_the_solution_patched(sandbox: SubprocessSandbox) -> None:
    # A correct solution that sabotages the modules the hidden checks import: the checks still pass it.
    (task,) = tasks_named(["lru"])
    saboteur = solution("lru") + ("\n\nimport random as _random, collections as _collections\n"
                                  "_random.Random = None\n_collections.OrderedDict = dict\n")
    result = _grade(task, saboteur, sandbox)
    assert result.passed, result.reason
