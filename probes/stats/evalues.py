"""Turning window p-values into evidence that accumulates (research/probes.md, "Sequential decisions").

A window's e-value has mean at most 1 under the null, so the e-CUSUM `M = e·max(1, M)` crosses a
threshold c with false alarms at least c windows apart on average (Shin, Ramdas, Rinaldo).
"""

from __future__ import annotations

import math

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


def calibrate(p: float, kappa: float | None = 0.5) -> float:
    """The p-to-e calibrator `κ·p^(κ−1)` for κ in (0, 1), or with κ None its mixture over κ
    (`calibrate_mixture`): any valid p gives a valid e."""
    if kappa is None:
        return calibrate_mixture(p)
    if not 0 < kappa < 1:
        raise ValueError("kappa must be in (0, 1)")
    if not 0 <= p <= 1:
        raise ValueError("p must be in [0, 1]")
    if p == 0:
        return float("inf")
    try:
        return float(kappa * p ** (kappa - 1))
    except OverflowError:  # a small kappa and a subnormal p: past any bar (the fleet caps it)
        return float("inf")


def calibrate_mixture(p: float) -> float:
    """`κ·p^(κ−1)` averaged over κ uniform on (0, 1): `(1 − p + p·ln p) / (p·(ln p)²)` (Vovk and
    Wang 2021), a valid calibrator that needs no κ. It gives about 1/(p·ln²p) at small p (1,342 at
    5e-6, where κ = 0.5 gives 224) and costs a passing p-value little more (0.64 at p = 0.5, κ = 0.5:
    0.71; 0.5 at p = 1, as κ = 0.5)."""
    if not 0 <= p <= 1:
        raise ValueError("p must be in [0, 1]")
    if p == 0:
        return float("inf")
    q = -math.log(p)
    if q < 1e-3:  # the closed form cancels near p = 1: its series in q = -ln p, error below 1e-12
        return math.exp(q) * (0.5 - q / 3 + q * q / 8 - q**3 / 30)
    return (-math.expm1(-q) - q * p) / (p * q * q)


def ecusum_update(previous: float, e: float) -> float:
    """One step of the e-CUSUM detector: `M_t = e_t·max(1, M_{t−1})`."""
    if e < 0:
        raise ValueError("e-values are non-negative")
    return e * max(1.0, previous)
