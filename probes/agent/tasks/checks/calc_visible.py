"""Public checks for calc.py."""


def test_addition(m):
    assert m.evaluate("1 + 2") == 3.0


def test_multiplication(m):
    assert m.evaluate("3 * 4") == 12.0


def test_malformed(m):
    try:
        m.evaluate("1 +")
    except ValueError:
        return
    raise AssertionError("'1 +' did not raise ValueError")
