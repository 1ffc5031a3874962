"""Turning window p-values into evidence that accumulates (research/probes.md, "Sequential decisions").

A window's e-value has mean at most 1 under the null, so the e-CUSUM `M = e·max(1, M)` crosses a
threshold c with false alarms at least c windows apart on average (Shin, Ramdas, Rinaldo).
"""

from __future__ import annotations

from probes.settings import HealthSettings


def window_e_value(p: float | None, alpha: float, *, low: float, high: float) -> float:
    """`low + high·1{p <= alpha}`; 1 (no evidence either way) when there is no p-value.

    Its null mean is at most `low + high·alpha`, which is 1 with the default settings."""
    if p is None:
        return 1.0
    return low + high * (1.0 if p <= alpha else 0.0)


def window_e(p: float | None, alpha: float, health: HealthSettings) -> float:
    """`window_e_value` with the thresholds of the `probes.health` settings."""
    return window_e_value(p, alpha, low=health.window_e_low, high=health.window_e_high)


def calibrate(p: float, kappa: float = 0.5) -> float:
    """The p-to-e calibrator `κ·p^(κ−1)` for κ in (0, 1): any valid p gives a valid e."""
    if not 0 < kappa < 1:
        raise ValueError("kappa must be in (0, 1)")
    if not 0 <= p <= 1:
        raise ValueError("p must be in [0, 1]")
    return float("inf") if p == 0 else kappa * p ** (kappa - 1)


def ecusum_update(previous: float, e: float) -> float:
    """One step of the e-CUSUM detector: `M_t = e_t·max(1, M_{t−1})`."""
    if e < 0:
        raise ValueError("e-values are non-negative")
    return e * max(1.0, previous)
