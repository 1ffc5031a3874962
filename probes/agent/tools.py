"""The agent's tools: their OpenAI schemas, an in-memory workspace, and the dispatcher that runs a
tool call and always answers with text (an error message for a malformed call, never an exception).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

MAX_FILE_CHARS = 64_000
MAX_FILES = 8
_FILENAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Create or replace a file in the working directory.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "a plain file name, e.g. flappy.py"},
            "content": {"type": "string", "description": "the whole file content"},
        }, "required": ["path", "content"]},
    }},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a file from the working directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }},
    {"type": "function", "function": {
        "name": "run_tests",
        "description": "Run the public tests against the task's file and return their output.",
        "parameters": {"type": "object", "properties": {}},
    }},
]


class Workspace:
    """The files the model wrote, in memory only; names are plain file names."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def write(self, path: str, content: str) -> str:
        if not _FILENAME.match(path) or ".." in path:
            return f"error: invalid path {path!r}: use a plain file name such as solution.py"
        if len(content) > MAX_FILE_CHARS:
            return f"error: {path} is {len(content)} characters; the limit is {MAX_FILE_CHARS}"
        if path not in self.files and len(self.files) >= MAX_FILES:
            return f"error: at most {MAX_FILES} files"
        self.files[path] = content
        return f"wrote {len(content)} characters to {path}"

    def read(self, path: str) -> str:
        if path not in self.files:
            names = ", ".join(sorted(self.files)) or "none yet"
            return f"error: no file {path!r} (files: {names})"
        return self.files[path]


def _string_args(args: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        if name not in args:
            return f"error: missing argument {name!r}"
        if not isinstance(args[name], str):
            return f"error: argument {name!r} must be a string"
    return None


class ToolBox:
    def __init__(self, workspace: Workspace, run_tests: Callable[[Mapping[str, str]], str]) -> None:
        self.workspace = workspace
        self._run_tests = run_tests

    def call(self, name: str | None, raw_arguments: Any) -> tuple[str, bool]:
        """Run one tool call; returns (the text for the model, whether the call was well formed)."""
        if isinstance(raw_arguments, dict):
            args: Any = raw_arguments
        else:
            try:
                args = json.loads(raw_arguments or "{}")
            except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
                return f"error: the arguments are not valid JSON ({exc}); send a JSON object", False
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object", False
        if name == "write_file":
            if problem := _string_args(args, "path", "content"):
                return problem, False
            return self.workspace.write(args["path"], args["content"]), True
        if name == "read_file":
            if problem := _string_args(args, "path"):
                return problem, False
            return self.workspace.read(args["path"]), True
        if name == "run_tests":
            return self._run_tests(self.workspace.files), True
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        return f"error: unknown tool {name!r}; the tools are {known}", False
