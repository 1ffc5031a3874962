"""Each probe's share of an audit's time: the confirmatory round's reserve, the time kept for the
probes after one, and an even share when too little is left for that."""

from __future__ import annotations

import pytest

from probes.deadline import AuditClock
from probes.settings import AuditSettings, ProbeSettings


def clock(seconds: float = 100.0, keep: float = 10.0, share: float = 0.3) -> AuditClock:
    return AuditClock.start(1_000.0, AuditSettings(seconds=seconds, keep_seconds=keep, confirm_share=share))


def test_the_first_round_leaves_the_confirmatory_share() -> None:
    c = clock()
    assert c.ends == 1_100.0
    assert c.round_end(confirm=False) == pytest.approx(1_070.0)
    assert c.round_end(confirm=True) == 1_100.0


def test_a_probe_keeps_time_for_each_probe_after_it() -> None:
    c = clock()
    # 70 s of first round, two probes after this one: 10 s kept for each.
    assert c.probe_end(1_000.0, confirm=False, after=2) == pytest.approx(1_050.0)
    # The last probe of the confirmatory round may use everything left.
    assert c.probe_end(1_090.0, confirm=True, after=0) == 1_100.0


def test_time_left_over_goes_to_the_probes_after() -> None:
    c = clock()
    # The first probe finished early: the second gets its own share and what the first left.
    assert c.probe_end(1_005.0, confirm=False, after=1) == pytest.approx(1_060.0)


def test_with_too_little_left_each_probe_gets_an_even_share() -> None:
    c = clock(keep=30.0)
    # 60 s left of the round, two probes after this one: 90 s to keep is more than there is.
    assert c.probe_end(1_010.0, confirm=False, after=2) == pytest.approx(1_030.0)


def test_no_time_left_is_no_time() -> None:
    c = clock()
    assert c.probe_end(1_200.0, confirm=True, after=0) <= 1_200.0


def test_a_scheduled_runs_lease_is_sized_by_its_interval() -> None:
    # Not by the audit's bound: a run renews its lease while it lasts (tests/probes/test_scheduler.py),
    # and a lease held past the interval keeps a restarted replica from the job that much longer.
    settings = ProbeSettings(audit=AuditSettings(seconds=1_000.0), lease_seconds=60.0, intervals={"logprob_drift": 600.0})
    assert settings.lease_for(600.0) == pytest.approx(600.0 * 0.9 * 0.95)
    assert settings.lease_for(30.0) == 60.0  # never less than lease_seconds
    assert settings.lease_for(86_400.0) == pytest.approx(86_400.0 * 0.9 * 0.95)
