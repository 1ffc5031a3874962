"""Hidden checks for roman.py."""

_PAIRS = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
          (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))


def _expected(n):
    out = ""
    for value, letters in _PAIRS:
        while n >= value:
            out += letters
            n -= value
    return out


def _raises(fn, arg):
    try:
        fn(arg)
    except ValueError:
        return True
    return False


def _to_roman_all(m):
    return driver.calls([(m.to_roman, (n,)) for n in range(1, 4000)])  # noqa: F821 - from the judge


def smoke(m):
    driver.calls([(m.from_roman, (s,)) for s in _to_roman_all(m)])  # noqa: F821 - from the judge


def behaviour_converts_to_roman(m):
    assert m.to_roman(1994) == "MCMXCIV", m.to_roman(1994)


def behaviour_converts_from_roman(m):
    assert m.from_roman("MCMXCIV") == 1994, m.from_roman("MCMXCIV")


def behaviour_rejects_invalid(m):
    assert _raises(m.to_roman, 0) and _raises(m.from_roman, "ABC"), "invalid input was accepted"


def test_all_values(m):
    bad = [n for n, got in zip(range(1, 4000), _to_roman_all(m)) if got != _expected(n)]
    assert not bad, f"wrong for {bad[:5]}"


def test_round_trip(m):
    got = driver.calls([(m.from_roman, (_expected(n),)) for n in range(1, 4000)])  # noqa: F821 - from the judge
    bad = [n for n, value in zip(range(1, 4000), got) if value != n]
    assert not bad, f"wrong for {bad[:5]}"


def test_subtractive(m):
    assert [m.to_roman(n) for n in (4, 9, 40, 90, 400, 900)] == ["IV", "IX", "XL", "XC", "CD", "CM"]


def test_out_of_range(m):
    assert all(_raises(m.to_roman, n) for n in (0, -1, 4000, 10_000))


def test_non_canonical(m):
    for s in ("IIII", "VV", "IC", "XM", "MMMM", "IIX", "VX", "LL", "DD", "CMCM", ""):
        assert _raises(m.from_roman, s), f"{s!r} was accepted"


def test_bad_characters(m):
    for s in ("ABC", "mcm", "X I", "12"):
        assert _raises(m.from_roman, s), f"{s!r} was accepted"
