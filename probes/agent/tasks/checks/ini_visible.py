"""Public checks for ini_parser.py."""


def test_one_section(m):
    assert m.parse_ini("[a]\nx = 1\n") == {"a": {"x": "1"}}


def test_blank_lines(m):
    assert m.parse_ini("\n[a]\n\nx=1\n\n") == {"a": {"x": "1"}}
