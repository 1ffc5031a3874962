"""Public checks for roman.py."""


def test_small_numbers(m):
    assert [m.to_roman(n) for n in (1, 2, 3, 5, 10)] == ["I", "II", "III", "V", "X"]


def test_from_roman(m):
    assert m.from_roman("XII") == 12


def test_zero_is_rejected(m):
    try:
        m.to_roman(0)
    except ValueError:
        return
    raise AssertionError("to_roman(0) did not raise ValueError")
