"""gwctl's admin key: from --admin-key-file, $GW_ADMIN_KEY_FILE or $GW_ADMIN_KEY, so it need not
be on a command line (where `ps` shows it to every local user)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.cli.client import client_settings
from gateway.cli.gwctl import build_parser, main
from kernel.errors import ConfigError


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["engines", *argv])


def key_of(ns: argparse.Namespace) -> str | None:
    key = client_settings(ns).admin_key
    return key.get_secret_value() if key is not None else None


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GW_ADMIN_KEY", "GW_ADMIN_KEY_FILE", "GW_URL"):
        monkeypatch.delenv(name, raising=False)


def test_the_key_comes_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "admin.key"
    path.write_text("sk-admin-from-file-0001\n")
    assert key_of(args("--admin-key-file", str(path))) == "sk-admin-from-file-0001"


def test_the_key_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_ADMIN_KEY", "sk-admin-from-env-0001")
    assert key_of(args()) == "sk-admin-from-env-0001"
    path = tmp_path / "admin.key"
    path.write_text("sk-admin-env-file-0001")
    monkeypatch.setenv("GW_ADMIN_KEY_FILE", str(path))
    assert key_of(args()) == "sk-admin-env-file-0001"  # a file wins over a key
    assert key_of(args("--admin-key", "sk-admin-argv-00001")) == "sk-admin-argv-00001"  # the command line wins


def test_every_admin_command_takes_a_key_file() -> None:
    parser = build_parser()
    for argv in (["engines"], ["probe", "--provider", "p"], ["route", "explain", "--file", "-", "--live"]):
        ns = parser.parse_args([*argv, "--admin-key-file", "/k"])
        assert ns.admin_key_file == "/k", argv


def test_a_missing_or_empty_key_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines", "--admin-key-file", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gwctl: cannot read the admin key file") and err.count("\n") == 1
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        client_settings(args("--admin-key-file", str(empty)))
