"""`gwctl`: the operator's CLI. Thin: argparse -> the same Config and objects as the Python API.

Exit codes: 0 success, 1 a failed check (e.g. a degraded endpoint), 2 usage, config or connection error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gateway.cli import db as db_cmd
from gateway.cli import engines as engines_cmd
from gateway.cli import keys as keys_cmd
from gateway.cli import probe as probe_cmd
from gateway.cli import route as route_cmd
from gateway.cli import serve as serve_cmd
from gateway.cli import teams as teams_cmd
from gateway.cli import worker as worker_cmd
from kernel.errors import ConfigError
from probes.testbed import cli as testbed_cmd

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gwctl", description="Operate the LLM gateway.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve_cmd.add_parser(sub)
    engines_cmd.add_parser(sub)
    route_cmd.add_parser(sub)
    db_cmd.add_parser(sub)
    keys_cmd.add_parser(sub)
    teams_cmd.add_parser(sub)
    testbed_cmd.add_parser(sub)
    probe_cmd.add_parser(sub)
    worker_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Command | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return run(args)
    except ConfigError as exc:
        print(f"gwctl: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
