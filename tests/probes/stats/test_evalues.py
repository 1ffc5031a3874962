import numpy as np
import pytest
from scipy import integrate

from probes.settings import HealthSettings
from probes.stats.evalues import calibrate, calibrate_mixture, ecusum_update, window_e, window_e_value


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


def test_the_mixture_calibrator_is_kappa_s_calibrator_averaged_over_kappa() -> None:
    for p in (5e-6, 1e-3, 0.05, 0.5, 0.99, 0.999, 0.9995, 1 - 1e-9, 1.0):
        averaged, _ = integrate.quad(lambda k, p=p: k * p ** (k - 1), 0, 1)
        assert calibrate_mixture(p) == pytest.approx(averaged, rel=1e-9), p
        assert calibrate(p, None) == calibrate_mixture(p)
    # A valid calibrator: mean 1 under a uniform p. Integrated in t = -ln p, where its 1/(p ln^2 p)
    # singularity at p = 0 is a 1/t^2 tail: past t = 700 (p = 1e-304) that tail is 1/700 to 1e-300.
    head, _ = integrate.quad(lambda t: calibrate_mixture(float(np.exp(-t))) * np.exp(-t), 0, 700, limit=400)
    assert head + 1 / 700 == pytest.approx(1.0, rel=1e-6)
    # Its series near p = 1 and its closed form meet where it switches (-ln p = 1e-3).
    edge = float(np.exp(-1e-3))
    assert calibrate_mixture(np.nextafter(edge, 0)) == pytest.approx(calibrate_mixture(np.nextafter(edge, 1)), rel=1e-9)
    assert calibrate_mixture(0.0) == float("inf")
    with pytest.raises(ValueError):
        calibrate_mixture(1.5)


def test_the_mixture_gives_strong_evidence_more_and_costs_a_pass_little() -> None:
    """At a permutation floor of 5e-6 it gives about six times kappa 0.5's e-value; at p = 0.5 a pass
    costs a factor 0.64 where kappa 0.5 costs 0.71."""
    assert calibrate_mixture(5e-6) > 5 * calibrate(5e-6, 0.5)
    assert calibrate_mixture(0.5) == pytest.approx(0.639, abs=1e-3)
    assert calibrate_mixture(1.0) == 0.5


def test_a_small_kappa_and_a_subnormal_p_give_an_infinite_e_not_an_error() -> None:
    assert calibrate(1e-320, 0.01) == float("inf")  # 0.01 * p^-0.99 overflows a float


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
