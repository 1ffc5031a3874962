"""Hidden checks for calc.py."""

import random


def _close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _raises(m, text, exc=ValueError):
    try:
        m.evaluate(text)
    except exc:
        return True
    return False


def _random_expr(rng, depth=0):
    if depth > 3 or rng.random() < 0.3:
        return str(rng.randint(1, 20))
    op = rng.choice("+-*/")
    left, right = _random_expr(rng, depth + 1), _random_expr(rng, depth + 1)
    return f"({left} {op} {right})" if rng.random() < 0.5 else f"{left} {op} {right}"


def smoke(m):
    for text in ("1", "1 + 2", "(1 + 2) * 3", "-4 / 2"):
        m.evaluate(text)


def behaviour_precedence(m):
    assert _close(m.evaluate("2 + 3 * 4"), 14.0), m.evaluate("2 + 3 * 4")


def behaviour_parentheses(m):
    assert _close(m.evaluate("(2 + 3) * 4"), 20.0), m.evaluate("(2 + 3) * 4")


def behaviour_rejects_malformed(m):
    assert _raises(m, "1 +") and _raises(m, "(1 + 2"), "malformed input was accepted"


def test_left_associative(m):
    assert _close(m.evaluate("10 - 4 - 3"), 3.0) and _close(m.evaluate("8 / 4 / 2"), 1.0)


def test_unary(m):
    assert _close(m.evaluate("-3"), -3.0)
    assert _close(m.evaluate("-(2 + 1)"), -3.0)
    assert _close(m.evaluate("2 * -3"), -6.0)
    assert _close(m.evaluate("--3"), 3.0)
    assert _close(m.evaluate("+4 - -1"), 5.0)


def test_decimals_and_spaces(m):
    assert _close(m.evaluate("  2.5*4 "), 10.0) and _close(m.evaluate("0.25+0.5"), 0.75)


def test_returns_float(m):
    assert isinstance(m.evaluate("1 + 1"), float)


def test_errors(m):
    for text in ("", "   ", "1 2", "* 2", "()", "2 +* 3", "1 + a", "(1))", "((1)", "3 $ 4"):
        assert _raises(m, text), f"{text!r} was accepted"


def test_division_by_zero(m):
    assert _raises(m, "1 / 0", ZeroDivisionError) and _raises(m, "1 / (2 - 2)", ZeroDivisionError)


def test_random_expressions(m):
    rng = random.Random(3)
    for _ in range(300):
        text = _random_expr(rng)
        try:
            want = float(eval(text, {"__builtins__": {}}))  # the check's own oracle
        except ZeroDivisionError:
            assert _raises(m, text, ZeroDivisionError), text
            continue
        got = m.evaluate(text)
        assert _close(got, want), f"{text} = {got}, expected {want}"
