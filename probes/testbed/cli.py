"""`gwctl testbed`: start the fault-injection testbed's endpoints and keep them up until Ctrl-C.

The endpoints (name, URL, fault) go to stderr; with `--print-gateway-config` stdout gets the
`providers:` and `deployments:` YAML for `gwctl serve`, ending with a `# testbed ready` line.
Faults can be changed while it runs: `PUT <url>/_testbed/endpoints/<name>/fault`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

READY_COMMENT = "# testbed ready"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("testbed", help="run the fault-injection testbed's endpoints")
    _arguments(p)
    p.set_defaults(run=run)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default="deploy/testbed.yaml", help="testbed YAML (default: %(default)s)")
    p.add_argument(
        "--print-gateway-config", action="store_true", help="print providers/deployments YAML for gwctl serve"
    )
    p.add_argument("--startup-timeout", type=float, help="seconds to wait for the endpoints (overrides the config)")


def run(args: argparse.Namespace) -> int:
    from probes.testbed.backends import llama_cpp_missing
    from probes.testbed.config import TestbedConfigError, gateway_config_yaml, load_testbed_config
    from probes.testbed.harness import Testbed, TestbedError

    if (missing := llama_cpp_missing()) is not None:
        print(f"gwctl: {missing}", file=sys.stderr)
        return 2
    try:
        config = load_testbed_config(args.config)
    except TestbedConfigError as exc:
        print(f"gwctl: {exc}", file=sys.stderr)
        return 2
    timeout = args.startup_timeout or config.startup_timeout
    testbed = Testbed(config.specs(), startup_timeout=timeout, n_ctx=config.n_ctx, threads=config.threads)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            testbed.start()
        except TestbedError as exc:
            print(f"gwctl: {_one_line(str(exc))}", file=sys.stderr)
            return 2
        for spec in config.specs():
            fault = json.dumps(dict(spec.fault)) if spec.fault else "honest"
            print(f"{spec.name}\t{testbed.base_url(spec.name)}\t{fault}", file=sys.stderr)
        if args.print_gateway_config:
            sys.stdout.write(gateway_config_yaml(config, testbed.base_url))
        print(READY_COMMENT, flush=True)
        while not stop.wait(0.5):
            if dead := testbed.exited():
                print(f"gwctl: testbed process {dead} exited", file=sys.stderr)
                return 1
        return 0
    finally:
        testbed.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m probes.testbed`: the same command outside gwctl."""
    parser = argparse.ArgumentParser(prog="python -m probes.testbed", description="Run the testbed's endpoints.")
    _arguments(parser)
    return run(parser.parse_args(argv))
