"""An INI parser with sections, comments and error lines."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `ini_parser.py` (standard library only; do not use configparser) with a function
parse_ini(text) -> dict that parses INI text into {section name: {key: value}} (all strings).

Line by line, after stripping surrounding whitespace:
- an empty line, or a line starting with ";" or "#", is ignored;
- "[name]" starts section `name` (stripped; an empty name is an error); a section that appears
  again adds to the same dict; a section with no keys still appears (as an empty dict);
- "key = value" (split on the first "="): key and value are stripped, the key is lower-cased and
  must not be empty; the value is kept as written (no inline comment stripping: "a ; b" stays);
  a repeated key overwrites the earlier value; keys before any section header go to section "";
- any other line raises ValueError whose message contains "line N" (N counted from 1).
"""

INI = Task(name="ini", filename="ini_parser.py", prompt=PROMPT, forbidden_imports=frozenset({"configparser"}))
