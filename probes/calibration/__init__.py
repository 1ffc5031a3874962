"""Honest cross-engine calibrations of the probes' reference statistics, shipped as data.

Each `<model>.json` here is written by `bench/calibrate_reference.py`: the drift statistic S
(probes.stats.drift) of every prompt for every pair of honest engines serving the same GGUF, with
the probe settings it was measured at. `find_calibration` picks the file for an endpoint's model
(a configured file first, then the bundled ones); a margin is only as good as the match between
those settings and the probe's, so a mismatch falls back to the equality test, with a note.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 1
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
    values: tuple[float, ...]  # honest per-prompt statistics, every pair


def honest_quantiles(values: Sequence[float]) -> dict[str, float]:
    """The summary a calibration file carries: q50..q99 and the max."""
    arr = np.asarray(values, dtype=float)
    out = {f"q{round(q * 100)}": float(np.quantile(arr, q)) for q in QUANTILES}
    out["max"] = float(arr.max())
    return out


def parse_calibration(raw: object, source: str) -> Calibration:
    """A validated calibration; any problem is a one-line `CalibrationError`."""
    try:
        if not isinstance(raw, Mapping):
            raise TypeError("not a JSON object")
        if raw.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"schema {raw.get('schema')!r}, expected {SCHEMA_VERSION}")
        settings, honest = raw["settings"], raw["honest"]
        values = tuple(float(v) for v in honest["values"])
        if not values or len(values) != int(honest["n"]) or any(not np.isfinite(v) or v < 0 for v in values):
            raise ValueError("honest.values must be n finite, non-negative statistics")
        models = tuple(str(m) for m in raw["models"])
        prompts = tuple(str(p) for p in settings["prompts"])
        if not models or not prompts:
            raise ValueError("models and settings.prompts must not be empty")
        return Calibration(source, models, prompts, int(settings["requests"]), int(settings["top_logprobs"]), values)
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
    model: str, configured: str | None, prompts: Sequence[str], top_logprobs: int
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
        if cal.top_logprobs != top_logprobs or not set(prompts) <= set(cal.prompts):
            return None, (
                f"calibration {path.name} was measured at other settings (top_logprobs {cal.top_logprobs}, "
                f"its own prompts): equality test, which honest engines may fail"
            )
        return cal, f"calibrated: {path.name}"
    return None, f"no honest calibration for model {model!r}: equality test, which honest engines may fail"
