"""A blind drill of the on-demand audit: honest and faulty endpoints on other engines than the
reference, behind one gateway under neutral names, each audited by `gwctl probe` as a user would.

Per seed: the endpoints are shuffled onto neutral provider names (ep-01..ep-N, in a seeded order
that also sets their start order, hence their ports), a fresh gateway serves them all as
deployments of `smollm2` with the reference (llama-server as the gateway launches it: --jinja,
the model's template) as `probes.references`, and `gwctl probe --provider ep-XX --probes ...`
audits each endpoint in turn. The audit code sees only the names; the faults live in this script.

Engines: llama-server (the bundled binary, other -b/-ub or thread count than the reference) and
llama-cpp-python's `Llama` through the testbed (its own logits, numpy log-softmax and sampling),
which also serves every fault. Faults are the testbed's (probes/testbed/faults.py).

    nice -n 10 .venv/bin/python bench/blind_drill.py --quick --seeds 0     # a few endpoints
    nice -n 10 .venv/bin/python bench/blind_drill.py --set weights --seeds 0 1 2 --json w.json
    nice -n 10 .venv/bin/python bench/blind_drill.py --set behaviour --seeds 0 --json b.json
    nice -n 10 .venv/bin/python bench/blind_drill.py --set truncation --seeds 0 1 --json t.json
    nice -n 10 .venv/bin/python bench/blind_drill.py --set all --only "b 8" loops --full --seeds 0   # some kinds
    .venv/bin/python bench/blind_drill.py --report w.json b.json            # pool saved runs

Sets (`SETS`): `weights` (honest engines and the distribution faults, drift + fidelity), `behaviour`
(two honest engines, tool corruption, truncation, loops; sentinels + toolcalls), `truncation` (two
honest engines and silent cuts to half the window, tail or head kept; sentinels only), `requant`
(two honest engines and both re-quantizations; drift + fidelity), `all` (every
endpoint, all four probes: about 4-9 minutes an audit here).

Prints per seed and pooled the confusion matrix (honest/faulty x healthy/suspect/demoted), the
detection of each fault class (state after the audit, and which probes failed), and the wall time
of each audit.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.calibrate_reference import llama_server  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.cli.gwctl import main as gwctl  # noqa: E402
from gateway.config import load_config  # noqa: E402
from probes.testbed.harness import EndpointSpec, Testbed  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402
from tests.fakes.servers import BackgroundLoop, GatewayServer  # noqa: E402

ADMIN_KEY = "sk-gw-admin-blind-drill-0001"
MODEL = "smollm2"
N_CTX = 2048
STATES = ("healthy", "suspect", "demoted")
PROBES = "logprob_drift,fidelity,sentinels,toolcalls"
QUICK_PROBES = "logprob_drift,fidelity"
# The drill's sample sizes: one default audit (all four probes) took 527 s on a faulty endpoint
# here (the confirmatory round doubles the alarming probes), too long for 3 seeds x 10 endpoints
# in the time there was. `--full` keeps the defaults. Fidelity keeps its own (200 one-token samples,
# twice that in a confirmatory round): cheap, and at 100 a temperature x0.7 passed its confirmatory round.
# The tool-call suite keeps its own too (all 120 cases, 220-540 s an audit here): cut to 40, it
# judged 0 and 1 bad responses of 10% corrupted ones on seed 1 and left the fault SUSPECT.
DRILL_PROBES: dict[str, Any] = {
    "distribution": {"prompts": 10, "samples_per_prompt": 6, "max_tokens": 32},
    "sentinels": {"loops": {"repeats": 6, "samples": 10}},
}


@dataclass(frozen=True)
class Kind:
    """One endpoint kind: an honest engine (`server` changes to llama-server's config, or the
    testbed's `Llama`) or a testbed fault. `fault_class` is None for honest ones."""

    label: str
    fault_class: str | None = None
    server: Mapping[str, Any] | None = None  # llama-server EngineConfig changes
    fault: Mapping[str, Any] = field(default_factory=dict)  # testbed fault spec (Llama engine)


HONEST = (
    Kind("llama-server -b 8 -ub 8", server={"extra_args": ("--batch-size", "8", "--ubatch-size", "8")}),
    Kind("llama-server 2 threads", server={"n_threads": 2}),
    Kind("llama-cpp-python Llama"),
)
FAULTY = (
    Kind("temperature x0.7", "temperature", fault={"temperature_scale": 0.7}),
    Kind("25% gemma3-270m", "substitution", fault={"partial": {"share": 0.25, "fault": {"substitute": "gemma3-270m"}}}),
    Kind("re-quantized Q2_K (whole model)", "re-quantization", fault={"quantize": "Q2_K"}),
    Kind("10% tool-call corruption", "tool corruption", fault={"tool_corruption": {"rate": 0.1}}),
    Kind(
        "silent truncation to 1024 tokens (tail kept)",
        "truncation",
        fault={"truncate_prompt": {"tokens": N_CTX // 2, "keep": "tail", "report": "original"}},
    ),
    Kind("20% loops", "loops", fault={"loop": {"rate": 0.2}}),
    Kind("logit noise sigma 0.3", "logit noise", fault={"logit_noise": 0.3}),
    Kind("re-quantized ffn_down Q2_K (one tensor type)", "re-quantization",
         fault={"quantize_tensors": {"pattern": "ffn_down", "type": "Q2_K"}}),
)
# The head-keeping twin of FAULTY[4] (it loses the question, not early needles): the truncation set only.
HEAD_CUT = Kind(
    "silent truncation to 1024 tokens (head kept)",
    "truncation",
    fault={"truncate_prompt": {"tokens": N_CTX // 2, "keep": "head", "report": "original"}},
)
QUICK = (HONEST[0], HONEST[2], FAULTY[0], FAULTY[2])
# Blind sets: each is drilled on its own, every endpoint of a set audited with the same probes.
# `weights`: the faults in the model's distribution, with the probes meant for them (the issue's
# audit command); `behaviour`: tool calls, prompt truncation and loops, with the probes for those.
SETS: Mapping[str, tuple[tuple[Kind, ...], str]] = {
    "weights": (HONEST + FAULTY[:3] + FAULTY[6:], "logprob_drift,fidelity"),
    "behaviour": ((HONEST[2], HONEST[0], *FAULTY[3:6]), "sentinels,toolcalls"),
    "truncation": ((HONEST[2], HONEST[0], FAULTY[4], HEAD_CUT), "sentinels"),
    # The re-quantizations beside the two honest engines whose runs differ most (a shorter `weights`).
    "requant": ((HONEST[2], HONEST[0], FAULTY[2], FAULTY[7]), "logprob_drift,fidelity"),
    "all": (HONEST + FAULTY, PROBES),
}


@dataclass
class Endpoint:
    name: str  # the neutral provider name the audit sees
    kind: Kind
    base_url: str = ""


def assign(kinds: Sequence[Kind], seed: int) -> list[Endpoint]:
    """The kinds on neutral names in a seeded order; the order also sets start order (ports)."""
    order = np.random.default_rng(seed).permutation(len(kinds))
    return [Endpoint(f"ep-{i + 1:02d}", kinds[int(j)]) for i, j in enumerate(order)]


def with_seed(fault: Mapping[str, Any], seed: int) -> dict[str, Any]:
    return {**fault, "seed": seed} if fault else {}


@contextlib.contextmanager
def serving(endpoints: list[Endpoint], seed: int, workdir: Path) -> Iterator[str]:
    """Start the reference and every endpoint; yields the reference's base URL."""
    gguf = smollm2_path("blind-drill", default_cache_dir())
    with contextlib.ExitStack() as stack:
        ref_url, _ = stack.enter_context(llama_server(gguf, {}, workdir, "reference"))
        servers = [e for e in endpoints if e.kind.server is not None]
        for e in servers:  # in the shuffled order: ports follow it
            url, _ = stack.enter_context(llama_server(gguf, e.kind.server or {}, workdir, e.name))
            e.base_url = url + "/v1"
        in_testbed = [e for e in endpoints if e.kind.server is None]
        if in_testbed:
            specs = [EndpointSpec(e.name, MODEL, 0, with_seed(e.kind.fault, seed)) for e in in_testbed]
            tb = stack.enter_context(Testbed(specs, startup_timeout=600, n_ctx=N_CTX, threads=1))
            for e in in_testbed:
                e.base_url = tb.base_url(e.name)
        yield ref_url + "/v1"


def settings(endpoints: list[Endpoint], ref_url: str, seed: int, sizes: Mapping[str, Any]) -> Any:
    caps = {"tools": True, "logprobs": True, "max_top_logprobs": 20, "native_n": False}
    # The reference as the gateway serves its bundled engine (the `llamacpp` adapter: OpenAI's
    # sampling, no top-k or min-p cut unless asked); the endpoints as third-party providers (`openai`:
    # llama-server's own defaults apply to the honest ones).
    providers = [{"name": "ref", "kind": "llamacpp", "base_url": ref_url}]
    providers += [{"name": e.name, "kind": "openai", "base_url": e.base_url} for e in endpoints]
    # Every endpoint claims the weights the reference serves (the shipped Q4_1 GGUF), as a provider's
    # listing would: the faulty ones lie about it.
    deployments = [
        {"model": MODEL, "provider": p["name"], "context_window": N_CTX, "capabilities": caps, "weights": "Q4_1"}
        for p in providers
    ]
    return load_config(
        environ={},
        auth={"admin_key": ADMIN_KEY, "keys": [{"name": "user", "key": "sk-gw-user-blind-drill-0002"}]},
        providers=providers,
        deployments=deployments,
        # Defaults except: the seed, the reference, and a budget that lets every endpoint be audited.
        probes={
            "seed": seed,
            "references": {MODEL: f"ref/{MODEL}"},
            "budget_requests_per_day": 1_000_000,
            "budget_tokens_per_day": 100_000_000,
            **sizes,
        },
        timeouts={"connect": 5, "first_byte": 300, "between_chunks": 120, "total": 600},
    )


def audit(root: str, provider: str, probes: str) -> tuple[dict[str, Any], float, str]:
    """`gwctl probe --provider X --probes ... --json`: the run's summary, seconds, stderr."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gwctl(["probe", "--url", root, "--admin-key", ADMIN_KEY, "--provider", provider,
                      "--probes", probes, "--json"])  # fmt: skip
    seconds = time.monotonic() - started
    if code == 2:
        raise RuntimeError(f"gwctl probe --provider {provider} failed: {err.getvalue()[-2000:]}")
    (run,) = json.loads(out.getvalue())["runs"]
    return run, seconds, err.getvalue()


KEPT_DETAILS = ("conversation", "logprob_spread", "outside_head", "mixed_counts", "off_count", "figures",
                "reference_figures", "truth", "reference_judged", "null_error_rate", "pass_marks", "reasons", "dropped",
                "same_weights", "template_mismatches", "samplers", "loops", "seconds")


def record(e: Endpoint, run: dict[str, Any], seconds: float) -> dict[str, Any]:
    results = [
        {
            "probe": r["probe"] + (" (confirm)" if r.get("confirm") else ""),
            "verdict": r["verdict"],
            "p_value": r.get("p_value"),
            "statistic": r.get("statistic"),
            "grounds": r.get("grounds"),
            # The sentinels' findings (needle:truncation, loops:loops, ...): which of its checks failed.
            "findings": (r.get("details") or {}).get("findings"),
            "why": (r.get("details") or {}).get("error")
            or (r.get("details") or {}).get("skipped")
            or (r.get("details") or {}).get("reason"),
            # What a failure needs to be looked into: fidelity's conversation and how far its
            # answers' logprobs spread, the consistency check's mixed counts, the tool-call
            # suite's figures beside the reference's and the marks it was held to.
            **{k: v for k, v in (r.get("details") or {}).items() if k in KEPT_DETAILS},
        }
        for r in run["results"]
    ]
    return {
        "endpoint": e.name,
        "kind": e.kind.label,
        "honest": e.kind.fault_class is None,
        "fault_class": e.kind.fault_class,
        "state": run["state"],
        "verdict": run["verdict"],
        "transitions": [f"{t['from']}->{t['to']}: {t['reason']}" for t in run["transitions"]],
        # Each round's decision, also where the state stayed (a demotion the fleet's e-BH held back).
        "decisions": [r.get("reason") for r in run.get("rounds", [])],
        "template": (run.get("template") or {}).get("status"),
        "failed": sorted({r["probe"] for r in results if r["verdict"] == "fail"}),
        "no_verdict": sorted({r["probe"] for r in results if r["verdict"] not in ("pass", "fail")}),
        "results": results,
        "seconds": round(seconds, 1),
        "tokens": run.get("tokens"),
    }


def drill(
    kinds: Sequence[Kind], seed: int, probes: str, sizes: Mapping[str, Any], save: Any = None
) -> list[dict[str, Any]]:
    endpoints = assign(kinds, seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="blind-drill-") as tmp, serving(endpoints, seed, Path(tmp)) as ref_url:
        loop = BackgroundLoop().start()
        server = GatewayServer(create_app(settings(endpoints, ref_url, seed, sizes)), loop).start()
        try:
            for e in endpoints:
                run, seconds, _ = audit(server.root, e.name, probes)
                rows.append(record(e, run, seconds))
                r = rows[-1]
                if save is not None:
                    save(rows)
                print(f"seed {seed} {e.name} [{e.kind.label}]: {r['state']} failed={r['failed']} {seconds:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
        finally:
            server.stop()
            loop.stop()
    return rows


def confusion(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| | " + " | ".join(STATES) + " | other |", "|---|---|---|---|---|"]
    for label, honest in (("honest", True), ("faulty", False)):
        states = [r["state"] for r in rows if r["honest"] is honest]
        cells = [str(states.count(s)) for s in STATES] + [str(sum(s not in STATES for s in states))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_class(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| endpoint kind | audits | healthy / suspect / demoted | probes that failed (count) | s per audit |",
             "|---|---|---|---|---|"]  # fmt: skip
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        states = " / ".join(str(sum(r["state"] == s for r in mine)) for s in STATES)
        failed: dict[str, int] = {}
        for r in mine:
            for p in r["failed"]:
                failed[p] = failed.get(p, 0) + 1
        shown = ", ".join(f"{p} ({n})" for p, n in sorted(failed.items())) or "-"
        none = sorted({p for r in mine for p in r.get("no_verdict", [])})
        shown += f"; no verdict: {', '.join(none)}" if none else ""
        secs = ", ".join(f"{r['seconds']:.0f}" for r in mine)
        lines.append(f"| {kind} | {len(mine)} | {states} | {shown} | {secs} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", choices=sorted(SETS), default="weights", help="which endpoints (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help=f"4 endpoints, probes {QUICK_PROBES}")
    parser.add_argument("--probes", help=f"the audit's probes (default {PROBES})")
    parser.add_argument("--full", action="store_true", help="the probes' default sample sizes (DRILL_PROBES otherwise)")
    parser.add_argument("--only", nargs="+", metavar="LABEL",
                        help="keep the set's endpoint kinds whose label contains one of these")
    parser.add_argument("--audit-seconds", type=float, help="probes.audit.seconds (default: the gateway's)")
    parser.add_argument("--json", type=Path, help="write every audit's record here")
    parser.add_argument("--report", type=Path, nargs="+", help="only pool and print the records of these --json files")
    args = parser.parse_args()
    if args.report:
        pooled = [r for path in args.report for r in json.loads(path.read_text())["rows"]]
        for seed in sorted({r["seed"] for r in pooled}):
            print(f"### seed {seed}\n\n{confusion([r for r in pooled if r['seed'] == seed])}\n")
        seeds = " ".join(str(s) for s in sorted({r["seed"] for r in pooled}))
        print(f"### pooled over seeds {seeds}\n\n{confusion(pooled)}\n\n{by_class(pooled)}")
        return
    kinds, probes = (QUICK, QUICK_PROBES) if args.quick else SETS[args.set]
    probes = args.probes or probes
    if args.only:
        kinds = tuple(k for k in kinds if any(part in k.label for part in args.only))
        if not kinds:
            parser.error(f"--only {' '.join(args.only)}: no endpoint kind of the set matches")
    sizes = {} if args.full else DRILL_PROBES
    if args.audit_seconds is not None:
        sizes = {**sizes, "audit": {"seconds": args.audit_seconds}}
    print(f"endpoints: {len(kinds)} ({sum(k.fault_class is None for k in kinds)} honest); probes: {probes}; "
          f"sizes: {json.dumps(sizes) if sizes else 'defaults'}")  # fmt: skip
    all_rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        started = time.monotonic()

        def save(rows: list[dict[str, Any]], seed: int = seed, prior: list[dict[str, Any]] = all_rows) -> None:
            if args.json:
                done = prior + [{**r, "seed": seed} for r in rows]
                args.json.write_text(json.dumps({"probes": probes, "sizes": sizes, "rows": done}, indent=1) + "\n")

        rows = drill(kinds, seed, probes, sizes, save)
        all_rows += [{**r, "seed": seed} for r in rows]
        print(f"\n{by_class(rows)}", file=sys.stderr, flush=True)
        print(f"\n### seed {seed} ({time.monotonic() - started:.0f} s)\n\n{confusion(rows)}\n")
    print(f"### pooled over seeds {' '.join(map(str, args.seeds))}\n\n{confusion(all_rows)}\n\n{by_class(all_rows)}")


if __name__ == "__main__":
    main()
