"""Hidden checks for ini_parser.py."""


def _error(m, text):
    try:
        m.parse_ini(text)
    except ValueError as exc:
        return str(exc)
    return None


def smoke(m):
    text = "\n".join(f"[s{i}]\nkey{i} = value {i}\nother = {i}\n" for i in range(500))
    m.parse_ini(text)


def behaviour_sections(m):
    got = m.parse_ini("[a]\nx = 1\n[b]\ny = 2\n")
    assert got == {"a": {"x": "1"}, "b": {"y": "2"}}, got


def behaviour_comments_ignored(m):
    got = m.parse_ini("; top\n[a]\n# note\nx = 1\n   ; indented\n")
    assert got == {"a": {"x": "1"}}, got


def behaviour_rejects_malformed(m):
    assert _error(m, "[a]\nthis is not a pair\n") is not None, "a malformed line was accepted"


def test_error_line_number(m):
    message = _error(m, "[a]\nx = 1\n\noops\n")
    assert message is not None and "line 4" in message, message


def test_whitespace_and_case(m):
    got = m.parse_ini("  [ Main ]  \n  Key  =   some value  \n")
    assert got == {"Main": {"key": "some value"}}, got


def test_first_equals_splits(m):
    got = m.parse_ini("[a]\nurl = http://x/?a=b\nempty =\n")
    assert got == {"a": {"url": "http://x/?a=b", "empty": ""}}, got


def test_inline_text_kept(m):
    got = m.parse_ini("[a]\nx = a ; b # c\n")
    assert got == {"a": {"x": "a ; b # c"}}, got


def test_repeats(m):
    got = m.parse_ini("[a]\nx = 1\n[b]\n[a]\nx = 2\ny = 3\n")
    assert got == {"a": {"x": "2", "y": "3"}, "b": {}}, got


def test_global_keys(m):
    got = m.parse_ini("name = top\n[a]\nx = 1\n")
    assert got == {"": {"name": "top"}, "a": {"x": "1"}}, got


def test_empty(m):
    assert m.parse_ini("") == {} and m.parse_ini("\n; only comments\n\n") == {}


def test_errors(m):
    for text in ("[]\n", "[a]\n= value\n", "[a\n", "[a]\njust words\n"):
        assert _error(m, text) is not None, f"{text!r} was accepted"
