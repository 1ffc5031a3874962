"""The Bernoulli CUSUM: its steps, its reset, and its run lengths by simulation (seeded)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probes.stats.cusum import BernoulliCusum, run_lengths

CUSUM = BernoulliCusum(p0=0.002, p1=0.05, h=5.0)


def test_steps_are_log_likelihood_ratios() -> None:
    s, alarm = CUSUM.step(0.0, True)
    assert s == pytest.approx(math.log(0.05 / 0.002)) and not alarm
    s2, _ = CUSUM.step(s, False)
    assert s2 == pytest.approx(s + math.log(0.95 / 0.998))
    assert CUSUM.step(0.0, False) == (0.0, False)  # floored at zero


def test_alarm_at_threshold_then_restart() -> None:
    # Two bad events in a row: 2 * log(25) = 6.4 >= 5.
    s, alarms = CUSUM.run([True, True, False, True])
    assert alarms == [1]
    assert s == pytest.approx(CUSUM.bad_step)  # restarted at 0 after the alarm


def test_first_alarm_agrees_with_run() -> None:
    rng = np.random.default_rng(3)
    xs = rng.random(5000) < 0.03
    _, alarms = CUSUM.run(xs.tolist())
    assert alarms, "a 3% rate against a 0.2% baseline alarms within 5000 steps"
    assert CUSUM.first_alarm(xs) == alarms[0]
    assert CUSUM.first_alarm(np.zeros(1000, dtype=bool)) is None


@pytest.mark.parametrize("p0, p1, h", [(0.0, 0.1, 5.0), (0.1, 0.05, 5.0), (0.01, 1.0, 5.0), (0.01, 0.1, 0.0)])
def test_rejects_bad_parameters(p0: float, p1: float, h: float) -> None:
    with pytest.raises(ValueError):
        BernoulliCusum(p0, p1, h)


def test_in_control_false_alarms_are_rare() -> None:
    # At the baseline rate an alarm needs two bad events within ~29 responses: roughly one per
    # 9,000 responses, so few of 400 runs alarm within 1,000.
    lengths = run_lengths(CUSUM, 0.002, runs=400, horizon=1000, rng=np.random.default_rng(11))
    assert np.mean(lengths <= 1000) < 0.2


def test_detects_the_alarm_rate_quickly() -> None:
    lengths = run_lengths(CUSUM, 0.05, runs=400, horizon=1000, rng=np.random.default_rng(12))
    assert np.all(lengths <= 1000)
    assert np.median(lengths) < 120  # drift about +0.11 a step to cross 5, plus the first bad event


def test_run_length_falls_as_the_rate_rises() -> None:
    rng = np.random.default_rng(13)
    means = [run_lengths(CUSUM, r, runs=200, horizon=3000, rng=rng).mean() for r in (0.01, 0.05, 0.2)]
    assert means[0] > means[1] > means[2]
    assert means[2] < 15
