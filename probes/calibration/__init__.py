"""Honest cross-engine calibrations of the probes' reference statistics, shipped as data.

Each `<model>.json` here is written by `bench/calibrate_reference.py`: the drift statistic S
(probes.stats.drift) of every prompt for pairs of honest engines serving the same GGUF, with the
probe settings it was measured at. Engines whose windows are identical form one *family* (each
engine's `family` in the file): a pair inside a family is a duplicate, not evidence, and two pairs
of the same two families repeat one value. So the honest values are one per pair of families
(`honest.pairs`, cross-family only), and n counts those pairs, not their prompts (the prompts of one
pair are correlated): a pair's value is its largest S over the probe's prompts, so a margin on
those values bounds a whole comparison (probes.stats.equivalence).

`find_calibration` picks the file for an endpoint's model (a configured file first, then the
bundled ones); a margin is only as good as the match between those settings and the probe's, so a
mismatch falls back to the equality test, with a note. A probe asking for a subset of the file's
prompts is judged on those prompts' values only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 2
BUNDLED = Path(__file__).parent
QUANTILES = (0.5, 0.9, 0.95, 0.99)


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Calibration:
    source: str
    models: tuple[str, ...]
    prompts: tuple[str, ...]
    requests: int
    top_logprobs: int
    pairs: tuple[Mapping[str, float], ...]  # per cross-family pair: prompt -> S

    def values_for(self, prompts: Sequence[str]) -> tuple[float, ...]:
        """One honest value per cross-family pair: its largest S over `prompts` (of the file's)."""
        return tuple(max(pair[p] for p in prompts) for pair in self.pairs)

    @property
    def values(self) -> tuple[float, ...]:
        return self.values_for(self.prompts)


def honest_quantiles(values: Sequence[float]) -> dict[str, float]:
    """The summary a calibration file carries: q50..q99 and the max."""
    arr = np.asarray(values, dtype=float)
    out = {f"q{round(q * 100)}": float(np.quantile(arr, q)) for q in QUANTILES}
    out["max"] = float(arr.max())
    return out


def _statistic(value: object) -> float:
    s = float(value)  # type: ignore[arg-type]
    if not math.isfinite(s) or s < 0:
        raise ValueError("statistics must be finite and non-negative")
    return s


def _pairs(raw: Mapping[str, object], prompts: tuple[str, ...]) -> tuple[dict[str, float], ...]:
    engines, honest = raw["engines"], raw["honest"]
    if not isinstance(engines, Mapping) or not isinstance(honest, Mapping):
        raise TypeError("engines and honest must be objects")
    family = {str(name): int(e["family"]) for name, e in engines.items()}
    seen: set[tuple[int, int]] = set()
    out = []
    for pair in honest["pairs"]:
        fa, fb = family[str(pair["a"])], family[str(pair["b"])]
        key = (min(fa, fb), max(fa, fb))
        if fa == fb or key in seen:
            raise ValueError(f"honest pair {pair['a']}/{pair['b']} is not one of its own two families")
        seen.add(key)
        measured = {str(p): _statistic(v["statistic"]) for p, v in pair["prompts"].items()}
        if not set(prompts) <= set(measured):
            raise ValueError(f"honest pair {pair['a']}/{pair['b']} lacks some of settings.prompts")
        out.append(measured)
    if not out or len(out) != int(honest["n"]):
        raise ValueError("honest.n must count the honest cross-family pairs, at least one")
    return tuple(out)


def parse_calibration(raw: object, source: str) -> Calibration:
    """A validated calibration; any problem is a one-line `CalibrationError`."""
    try:
        if not isinstance(raw, Mapping):
            raise TypeError("not a JSON object")
        if raw.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {raw.get('schema')!r}, expected {SCHEMA_VERSION}")
        settings = raw["settings"]
        models = tuple(str(m) for m in raw["models"])
        prompts = tuple(str(p) for p in settings["prompts"])
        if not models or not prompts:
            raise ValueError("models and settings.prompts must not be empty")
        pairs = _pairs(raw, prompts)
        return Calibration(source, models, prompts, int(settings["requests"]), int(settings["top_logprobs"]), pairs)
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"{source}: {type(exc).__name__}: {exc}") from None


def load_calibration(path: Path) -> Calibration:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise CalibrationError(f"{path}: not JSON: {exc}") from None
    return parse_calibration(raw, str(path))


def find_calibration(
    model: str, configured: str | None, prompts: Sequence[str], top_logprobs: int, requests: int
) -> tuple[Calibration | None, str]:
    """The calibration for `model` measured at these settings, else None; and a note saying which
    file it is, or why there is none. Blocking (reads files): call it from a worker thread."""
    paths = [Path(configured).expanduser()] if configured else []
    paths += sorted(BUNDLED.glob("*.json"))
    for path in paths:
        try:
            cal = load_calibration(path)
        except CalibrationError as exc:
            if configured and path == paths[0]:
                return None, f"calibration unusable, equality test: {exc}"
            continue
        if model not in cal.models:
            continue
        if cal.top_logprobs != top_logprobs or cal.requests != requests or not set(prompts) <= set(cal.prompts):
            return None, (
                f"calibration {path.name} was measured at other settings (top_logprobs {cal.top_logprobs}, "
                f"requests {cal.requests}, its own prompts): equality test, which honest engines may fail"
            )
        subset = "" if set(prompts) == set(cal.prompts) else f" ({len(set(prompts))} of its {len(cal.prompts)} prompts)"
        return cal, f"calibrated: {path.name}{subset}"
    return None, f"no honest calibration for model {model!r}: equality test, which honest engines may fail"
