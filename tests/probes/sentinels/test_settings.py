import pytest
from pydantic import ValidationError

from probes.sentinels.settings import NeedleSettings


def test_the_default_grid_has_an_early_needle_and_sizes_above_half_the_window():
    n = NeedleSettings()
    assert min(n.depths) <= 0.05 and max(n.depths) >= 0.9
    assert n.upper_shares and all(0.5 < s < 1 for s in n.upper_shares)


@pytest.mark.parametrize("bad", [{"depths": (0.1, 1.5)}, {"depths": (-0.1,)}, {"upper_shares": (1.0,)}, {"upper_shares": (0.0,)}])
def test_depths_and_upper_shares_are_validated(bad):
    with pytest.raises(ValidationError):
        NeedleSettings(**bad)
