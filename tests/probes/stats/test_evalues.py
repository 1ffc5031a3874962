import numpy as np
import pytest
from scipy import integrate

from probes.settings import HealthSettings
from probes.stats.evalues import calibrate, ecusum_update, window_e, window_e_value


def test_window_e_value():
    assert window_e_value(0.01, 0.05, low=0.5, high=10) == 10.5
    assert window_e_value(0.2, 0.05, low=0.5, high=10) == 0.5
    assert window_e_value(None, 0.05, low=0.5, high=10) == 1.0


def test_default_window_e_has_null_mean_one():
    health = HealthSettings()
    rng = np.random.default_rng(0)
    mean = np.mean([window_e(p, 0.05, health) for p in rng.uniform(size=20_000)])
    assert mean == pytest.approx(1.0, abs=0.06)


def test_calibrator_has_mean_one_under_uniform_p():
    total, _ = integrate.quad(lambda p: calibrate(p, 0.5), 0, 1)
    assert total == pytest.approx(1.0, rel=1e-6)
    assert calibrate(0.01, 0.5) == pytest.approx(5.0)
    assert calibrate(0.0) == float("inf")
    with pytest.raises(ValueError):
        calibrate(0.5, 1.0)


def test_ecusum_resets_below_one_and_multiplies_above():
    m = 0.0
    for e in (0.5, 0.5):
        m = ecusum_update(m, e)
    assert m == 0.5
    for e in (10.5, 10.5, 10.5):
        m = ecusum_update(m, e)
    assert m == pytest.approx(10.5**3)
    with pytest.raises(ValueError):
        ecusum_update(1.0, -1.0)


def test_ecusum_rarely_alarms_under_the_null():
    health = HealthSettings()
    rng = np.random.default_rng(1)
    alarms = 0
    runs, steps = 200, 100
    for _ in range(runs):
        m = 0.0
        for p in rng.uniform(size=steps):
            m = ecusum_update(m, window_e(p, 0.05, health))
            if m >= health.demote_e:
                alarms += 1
                break
    # Ville-type bound: false alarms at least c=720 windows apart on average.
    assert alarms / runs <= 0.1


def test_ecusum_alarms_quickly_when_windows_reject():
    health = HealthSettings()
    rng = np.random.default_rng(2)
    m, steps = 0.0, 0
    while m < health.demote_e:
        steps += 1
        m = ecusum_update(m, window_e(0.01 if rng.uniform() < 0.8 else 0.5, 0.05, health))
    assert steps <= 12
