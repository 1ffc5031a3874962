"""The spill file: append with a size limit, rotate, replay in batches, resume after a crash."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.persistence.records import decode_line, encode_line
from gateway.persistence.spill import SpillFile, SpillFull
from tests.gateway.persistence.factories import record


def test_lines_round_trip() -> None:
    r = record("req_1", ttft=0.5)
    r.request_body = {"messages": []}
    r.response_body = b"{}"
    at, back = decode_line(encode_line(123.5, r))
    assert at == 123.5
    assert back.request_id == "req_1" and back.ttft_s == 0.5 and back.cost_usd == r.cost_usd
    assert back.request_body == '{"messages":[]}' and back.response_body == "{}"


def test_append_rotate_replay(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    assert not spill.pending() and not spill.rotate()
    for i in range(5):
        spill.append(float(i), record(f"r{i}"))
    assert spill.pending() and spill.size > 0
    assert spill.rotate()
    spill.append(9.0, record("after"))  # new spills go to a fresh file during replay

    batches = list(spill.replay_batches(2))
    assert [[r.request_id for _, r in b] for b, _ in batches] == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert [lines for _, lines in batches] == [2, 4, 5]
    spill.finish_replay()
    assert not spill.replay_path.exists()
    assert spill.pending()  # "after" is still waiting
    spill.close()


def test_replay_resumes_after_a_crash(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    for i in range(5):
        spill.append(float(i), record(f"r{i}"))
    spill.rotate()
    (first, lines), *_ = spill.replay_batches(2)
    spill.mark_done(lines)  # stored, then the process died

    again = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    assert again.pending() and again.rotate()  # the unfinished replay file comes first
    assert [r.request_id for b, _ in again.replay_batches(10) for _, r in b] == ["r2", "r3", "r4"]


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    spill.append(1.0, record("ok"))
    spill.close()
    with open(tmp_path / "spill.jsonl", "ab") as f:
        f.write(b'{"request_id": "torn", "at"')
    again = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    again.rotate()
    assert [r.request_id for b, _ in again.replay_batches(10) for _, r in b] == ["ok"]


def test_size_limit(tmp_path: Path) -> None:
    one = len(encode_line(1.0, record("r")))
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=2 * one)
    spill.append(1.0, record("r"))
    spill.append(1.0, record("r"))
    with pytest.raises(SpillFull):
        spill.append(1.0, record("r"))
    spill.close()


def test_a_torn_last_line_is_repaired_on_open(tmp_path: Path) -> None:
    path = tmp_path / "spill.jsonl"
    whole = encode_line(1.0, record("whole"))
    torn = encode_line(2.0, record("torn"))[:40]  # SIGKILL mid-write: no newline
    path.write_bytes(whole + torn)

    spill = SpillFile(path, max_bytes=1 << 20, repair=True)
    assert spill.size == len(whole)  # the torn fragment is cut, not counted
    spill.append(3.0, record("next"))  # would otherwise merge with the fragment into one bad line
    assert spill.rotate()
    spill.settle()
    (batch, _), = spill.replay_batches(10)
    assert [r.request_id for _, r in batch] == ["whole", "next"]


def test_a_file_that_is_only_a_torn_line_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "spill.jsonl"
    path.write_bytes(b'{"at": 1.0, "rec')
    assert SpillFile(path, max_bytes=1 << 20).size == 16  # a reader beside the appender leaves it be
    spill = SpillFile(path, max_bytes=1 << 20, repair=True)
    assert spill.size == 0 and not spill.pending()
    assert path.read_bytes() == b""


def test_rotation_leaves_the_fsync_to_settle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.persistence.spill as spill_module

    synced: list[int] = []
    monkeypatch.setattr(spill_module.os, "fsync", lambda fd: synced.append(fd))
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    spill.append(1.0, record("a"))
    assert spill.rotate()
    assert synced == []  # rotate runs on the event loop: no fsync there
    spill.append(2.0, record("b"))  # the fresh file takes appends meanwhile
    spill.settle()  # what the writer runs in a thread
    assert len(synced) == 1
    (batch, _), = spill.replay_batches(10)
    assert [r.request_id for _, r in batch] == ["a"]
    spill.close()


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)  # what most services run with: new files would be 0644
    try:
        yield
    finally:
        os.umask(old)


def test_the_spill_file_is_created_0600(tmp_path: Path, usual_umask: None) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    spill.append(1.0, record("r1"))
    spill.close()
    assert stat.S_IMODE(os.stat(tmp_path / "spill.jsonl").st_mode) == 0o600
    spill.rotate()
    assert stat.S_IMODE(os.stat(spill.replay_path).st_mode) == 0o600
