"""Roman numerals both ways, canonical forms only."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `roman.py` (standard library only) with two functions:

to_roman(n) -> str: n is an int from 1 to 3999; return its canonical upper-case Roman numeral,
using the subtractive forms IV, IX, XL, XC, CD, CM (e.g. 4 -> "IV", 1994 -> "MCMXCIV",
3999 -> "MMMCMXCIX"). Raise ValueError for any other value, including 0, negatives and 4000.

from_roman(s) -> int: the inverse; accept only canonical upper-case numerals (exactly the strings
to_roman can return) and raise ValueError for anything else: the empty string, other characters,
and non-canonical forms such as "IIII", "VV", "IC", "XM" or "MMMM".
"""

ROMAN = Task(name="roman", filename="roman.py", prompt=PROMPT)
