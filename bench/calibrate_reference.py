"""Calibrate the logprob drift probe's reference comparison on honest cross-engine pairs.

Two correct engines serving the same GGUF are deterministic at T=0 but not identical (kernels,
batch split, accumulation order, prompt-cache reuse), so an equality test against a reference
rejects honest engines at its p-value floor (issue 22). This script measures how far apart honest
engines are under the probe's own statistic, and writes that distribution as data the probe
loads (probes/calibration): the reference comparison then asks whether an endpoint is further from
the reference than honest engines are from each other.

Engines, all on the shipped SmolLM2 GGUF:
- llama-server as the gateway launches it (`providers.engines.commands.llamacpp_command`: --jinja,
  the bundled template, prompt cache on), 1 thread: the reference;
- the same with another batch size (-b/-ub 8), with 2 threads, and without prompt-cache reuse;
- llama-cpp-python's `Llama` with its own logits (numpy log-softmax), through the testbed's service.

Every pair of engines gives one value of the statistic per drift prompt: S of `probes.stats.drift`
(mean absolute gap of per-token mean logprobs, imputation as the probe does it) on windows drawn by
the probe's own `sample_window` (its prompts, `requests` answers each, top-k logprobs at T=0).
With `--faults`, testbed faults (served by the `Llama` engine) are measured against the reference
too, and so are the honest engines against the reference before issue 22 (llama-cpp-python's
`chatml-function-calling` format); printed, and kept in the file for the record: the probe reads
only the honest values. The table's verdicts are the probe's at its default alpha, by equality and
against the margin these honest values give (in-sample for the honest pairs, by construction;
marked unused when its bound is above `calibration_fpr`, where the probe keeps the equality test).

    nice -n 15 .venv/bin/python bench/calibrate_reference.py --faults     # ~2 minutes here
    .venv/bin/python bench/calibrate_reference.py --out /tmp/cal.json     # somewhere else
    .venv/bin/python bench/calibrate_reference.py --recompute probes/calibration/smollm2.json  # no engine run
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.base import Outcome, verdict_from_p  # noqa: E402
from probes.calibration import SCHEMA_VERSION, honest_quantiles  # noqa: E402
from probes.logprob_drift import Window, sample_window, truncate  # noqa: E402
from probes.settings import DriftSettings  # noqa: E402
from probes.stats.drift import drift_test  # noqa: E402
from probes.stats.equivalence import beyond_margin, conformal_margin  # noqa: E402
from providers.engines.commands import ENGINE_KINDS, engine_environment, llamacpp_command  # noqa: E402
from providers.engines.config import EngineConfig  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "probes" / "calibration" / "smollm2.json"
# The model names the gateway serves the shipped SmolLM2 under (bundled engine, testbed).
MODEL_NAMES = ("smollm2-135m-instruct", "smollm2")
REFERENCE = "server"

# name -> EngineConfig changes from the reference's (llama-server engines).
SERVERS: Mapping[str, dict[str, Any]] = {
    "server": {},
    "server-b8": {"extra_args": ("--batch-size", "8", "--ubatch-size", "8")},
    "server-t2": {"n_threads": 2},
    "server-nocache": {"prefix_cache": False},
    "server-ub16": {"extra_args": ("--ubatch-size", "16")},
    "server-fa": {"extra_args": ("--flash-attn", "on")},
}
# name -> threads (llama-cpp-python engines, through the testbed's service).
LLAMAS: Mapping[str, int] = {"llama-cpp-python": 1, "llama-cpp-python-t2": 2}
FAULTS: Mapping[str, dict[str, Any]] = {
    "logit_noise 0.1": {"logit_noise": 0.1, "seed": 1},
    "logit_noise 0.5": {"logit_noise": 0.5, "seed": 1},
    "requantized Q8_0": {"quantize": "Q8_0"},
    "requantized Q2_K": {"quantize": "Q2_K"},
    "requantized ffn_down Q2_K (one tensor type)": {"quantize_tensors": {"pattern": "ffn_down", "type": "Q2_K"}},
    "temperature x0.7": {"temperature_scale": 0.7},
    "substitute gemma3-270m": {"substitute": "gemma3-270m"},
}


class HttpSide:
    """The probe's client protocol (`chat(body)`) over one llama-server."""

    def __init__(self, url: str) -> None:
        self._http = httpx.AsyncClient(base_url=url, timeout=120)

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        r = await self._http.post("/v1/chat/completions", json={**body, "model": "m"})
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data

    async def close(self) -> None:
        await self._http.aclose()


class LlamaSide:
    """The same protocol over the testbed's in-process service (llama-cpp-python `Llama`)."""

    def __init__(self, service: Any, fault: Mapping[str, Any], seed: int = 0) -> None:
        from probes.testbed.faults import parse_fault

        self._service, self._spec = service, parse_fault(dict(fault))
        self._rng = np.random.default_rng(seed)
        service.prepare("smollm2", self._spec)

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        from probes.testbed.faults import draw
        from probes.testbed.wire import parse_chat

        response, _ = self._service.chat("smollm2", "m", parse_chat(body), draw(self._spec, self._rng))
        return response


class OldReferenceSide:
    """The reference before issue 22: llama-cpp-python's `chatml-function-calling` chat format (no
    default system prompt) instead of the model's own template, as its OpenAI server answered."""

    def __init__(self, gguf: Path) -> None:
        import llama_cpp

        from probes.testbed.backends import disable_extra_buffers

        disable_extra_buffers()
        self._llm = llama_cpp.Llama(
            model_path=str(gguf), n_ctx=2048, n_threads=1, chat_format="chatml-function-calling",
            logits_all=True, verbose=False,
        )  # fmt: skip

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        keys = ("messages", "max_tokens", "temperature", "logprobs", "top_logprobs")
        response = self._llm.create_chat_completion(**{k: body[k] for k in keys})
        data: dict[str, Any] = json.loads(json.dumps(response, default=float))  # numpy floats -> JSON numbers
        return data


@contextmanager
def llama_server(gguf: Path, changes: Mapping[str, Any], workdir: Path, name: str) -> Iterator[tuple[str, list[str]]]:
    cfg = EngineConfig(**{"model": "smollm2", "n_ctx": 2048, "n_threads": 1, **changes})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = llamacpp_command(cfg, port=port, model=str(gguf), cpu_count=os.cpu_count() or 1)
    env = engine_environment(ENGINE_KINDS["llamacpp"], os.environ)
    log = (workdir / f"{name}.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after 120 s; see {log.name}")
            time.sleep(0.2)
        yield url, argv
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def window_of(side: Any, settings: DriftSettings) -> Window:
    window, errors = await sample_window(side, settings.prompts, settings.requests, settings.top_logprobs, lambda: None)
    if errors:
        raise RuntimeError(f"{errors} requests failed")
    return window


def per_prompt(a: Window, b: Window, settings: DriftSettings, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """The probe's statistic S (and the equality test's p) of each prompt, both sides at top-k."""
    k = settings.top_logprobs
    outcome = drift_test(truncate(a, k), truncate(b, k), permutations=settings.permutations, rng=rng)
    prompts = outcome.details["prompts"]
    return {p: {"statistic": float(v["statistic"]), "p_value": float(v["p_value"])} for p, v in prompts.items()}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from probes.testbed.backends import LlamaOptions, ModelFiles, ModelPool, load_llama, quantized_cache_dir
    from probes.testbed.service import Service

    settings = DriftSettings()
    gguf = smollm2_path("calibrate", default_cache_dir())
    windows: dict[str, Window] = {}
    engines: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        for name, changes in SERVERS.items():
            started = time.monotonic()
            with llama_server(gguf, changes, Path(tmp), name) as (url, argv):
                side = HttpSide(url)
                windows[name] = await window_of(side, settings)
                await side.close()
            engines[name] = {
                "engine": "llama-server",
                "changes": {k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()},
                "argv": _flags(argv),
            }
            print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        import llama_cpp

        services = []
        for name, threads in LLAMAS.items():
            started = time.monotonic()
            options = LlamaOptions(n_ctx=2048, n_threads=threads)
            services.append(Service(ModelFiles(quantized_cache_dir()), ModelPool(partial(load_llama, options=options))))
            windows[name] = await window_of(LlamaSide(services[-1], {}), settings)
            engines[name] = {
                "engine": "llama-cpp-python",
                "version": llama_cpp.__version__,
                "changes": {"n_threads": threads, "logits": "Llama.scores, numpy log-softmax"},
            }
            print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        service = services[0]
        rng = np.random.default_rng(0)
        pairs = [
            {
                "a": a,
                "b": b,
                "with_reference": REFERENCE in (a, b),
                "prompts": per_prompt(windows[a], windows[b], settings, rng),
            }
            for a, b in itertools.combinations(windows, 2)
        ]
        faults = []
        if args.faults:
            for label, fault in FAULTS.items():
                started = time.monotonic()
                window = await window_of(LlamaSide(service, fault), settings)
                faults.append(
                    {"fault": label, "spec": fault, "prompts": per_prompt(window, windows[REFERENCE], settings, rng)}
                )
                print(f"{label}: {time.monotonic() - started:.1f} s", file=sys.stderr)
            old = await window_of(OldReferenceSide(gguf), settings)
            for name in (REFERENCE, "llama-cpp-python"):
                faults.append({"fault": f"{name} vs the old reference", "spec": {"old_reference": True},
                               "prompts": per_prompt(windows[name], old, settings, rng)})  # fmt: skip
    families: dict[str, list[str]] = {}
    for name, window in windows.items():
        families.setdefault(json.dumps(window, sort_keys=True), []).append(name)
    return {
        "schema": SCHEMA_VERSION,
        "models": list(MODEL_NAMES),
        "gguf": {"file": gguf.name, "sha256": sha256(gguf)},
        "probe": "logprob_drift",
        "statistic": "S of probes.stats.drift per prompt: mean |gap| of per-token mean top-k logprobs",
        "settings": {
            "prompts": list(settings.prompts),
            "requests": settings.requests,
            "top_logprobs": settings.top_logprobs,
        },
        "reference": REFERENCE,
        **honest_section(engines, pairs, list(families.values())),
        "faults": faults,
        "regenerate": "nice -n 15 .venv/bin/python bench/calibrate_reference.py --faults",
    }


def honest_section(
    engines: Mapping[str, dict[str, Any]], pairs: list[dict[str, Any]], families: list[list[str]]
) -> dict[str, Any]:
    """`engines` (each with its family), every measured pair, and the honest values the probe reads.

    Engines whose windows are identical form one family: a pair inside one is a duplicate, not
    evidence, and a second pair of the same two families repeats a value. So the honest values are
    one per pair of families (the first measured, the reference's when it is in one), and each is
    the pair's largest S over the prompts: n counts independent cross-family pairs, not prompts."""
    family_of = {name: i for i, members in enumerate(families) for name in members}
    kept: dict[tuple[int, int], dict[str, Any]] = {}
    for pair in pairs:
        fa, fb = family_of[pair["a"]], family_of[pair["b"]]
        if fa != fb:
            kept.setdefault((min(fa, fb), max(fa, fb)), pair)
    values = [max(v["statistic"] for v in pair["prompts"].values()) for pair in kept.values()]
    honest: dict[str, Any] = {
        "statistic": "per cross-family pair: its largest S over the prompts",
        "families": families,
        "n": len(kept),
        "values": values,
        "quantiles": honest_quantiles(values) if values else {},
        "pairs": [{"a": p["a"], "b": p["b"], "prompts": p["prompts"]} for p in kept.values()],
    }
    return {
        "engines": {name: {**e, "family": family_of[name]} for name, e in engines.items()},
        "pairs": pairs,
        "honest": honest,
    }


def recompute(path: Path) -> dict[str, Any]:
    """A calibration file's honest section recomputed from the pairs it records, engines not re-run
    (a schema-1 file's families are its `honest.identical_windows`)."""
    data = json.loads(path.read_text())
    honest = data["honest"]
    families = honest.get("families") or honest["identical_windows"]
    engines = {name: {k: v for k, v in e.items() if k != "family"} for name, e in data["engines"].items()}
    data.update(honest_section(engines, data["pairs"], families))
    data["schema"] = SCHEMA_VERSION
    return data


def _flags(argv: list[str]) -> list[str]:
    """The launch flags, without the machine-specific paths and ports."""
    out, skip = [], False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
            continue
        if arg in ("--model", "--port", "--cors-origins", "--chat-template-file"):
            out += [arg, Path(argv[i + 1]).name if arg != "--port" else "PORT"]
            skip = True
            continue
        out.append(arg)
    return out


def report(data: Mapping[str, Any]) -> None:
    q = data["honest"]["quantiles"]
    print(f"measured pairs: {len(data['pairs'])}, honest cross-family pairs n={data['honest']['n']}")
    print("families (identical windows): " + "; ".join(", ".join(f) for f in data["honest"]["families"]))
    print("quantiles: " + ", ".join(f"{k}={v:.4g}" for k, v in q.items()))
    settings = DriftSettings()
    margin = conformal_margin(data["honest"]["values"], settings.calibration_fpr)
    used = margin.bound <= settings.calibration_fpr
    print(
        f"margin {margin.value:.4f} (n={margin.n}, per-comparison bound {margin.bound:.3g} vs calibration_fpr "
        f"{settings.calibration_fpr:g}: {'used by the probe' if used else 'NOT used: the probe keeps the equality test'})"
        f"; verdicts at alpha {settings.alpha}"
    )
    prompts_shown = " | ".join(repr(p) for p in data["settings"]["prompts"])
    print(f"\n| pair | {prompts_shown} | max S | equality p | equality | calibrated |")
    print("|---|" + "---|" * (len(data["settings"]["prompts"]) + 4))
    rows = [(f"{p['a']} vs {p['b']}", p["prompts"]) for p in data["pairs"]]
    rows += [
        (f["fault"] if "old_reference" in f["spec"] else f"fault: {f['fault']}", f["prompts"]) for f in data["faults"]
    ]
    for label, prompts in rows:
        stats = [prompts[p]["statistic"] for p in data["settings"]["prompts"]]
        equality = Outcome(
            statistic=max(stats), p_value=min(1.0, len(stats) * min(v["p_value"] for v in prompts.values())),
            details={"prompts": prompts},
        )  # fmt: skip
        calibrated = beyond_margin(equality, margin)
        verdicts = [verdict_from_p(o.p_value, settings.alpha) for o in (equality, calibrated)]
        verdicts[1] += "" if used else " (margin unused)"
        shown = " | ".join(f"{s:.4f}" for s in stats)
        print(f"| {label} | {shown} | {max(stats):.4f} | {equality.p_value:.3g} | {verdicts[0]} | {verdicts[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--faults", action="store_true", help="also measure testbed faults against the reference")
    parser.add_argument("--recompute", type=Path, metavar="FILE", help="recompute FILE's honest values, no engine run")
    args = parser.parse_args()
    data = recompute(args.recompute) if args.recompute else asyncio.run(measure(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    report(data)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
