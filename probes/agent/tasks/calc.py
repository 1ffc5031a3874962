"""An arithmetic expression evaluator: a tokenizer and a precedence-respecting parser."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `calc.py` (standard library only) with a function evaluate(expr) -> float that computes an
arithmetic expression given as a string. Do not use eval, exec or compile: tokenize and parse it.

- Numbers: digits with an optional decimal part ("3", "2.5", "0.25").
- Binary operators + - * /, with * and / binding tighter than + and -, all left-associative
  ("10 - 4 - 3" is 3, "8 / 4 / 2" is 1, "2 + 3 * 4" is 14).
- Unary minus and plus before a number or a parenthesised group ("-3", "-(2 + 1)", "2 * -3").
- Parentheses group; spaces anywhere between tokens are ignored.
- The result is always a float.
- Raise ValueError for malformed input: empty or blank text, an unknown character, unbalanced
  parentheses, a missing operand ("1 +", "* 2", "()"), or two numbers in a row ("1 2").
- Division by zero raises ZeroDivisionError.
"""

CALC = Task(name="calc", filename="calc.py", prompt=PROMPT, forbidden_calls=frozenset({"eval", "exec", "compile"}))
