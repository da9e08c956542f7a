"""A stored train.log read by ranges: `--tail N` from the end, every line made safe and
cut at its cap, on a real `file://` store (moto and Azurite: tests/ops/tasks/test_fab_logs.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ops.runs import stored_log
from ops.runs.log_lines import LogLines
from stack import storage_layout
from trainer.storage import open_store

CAP = 10


def _shown(tmp_path: Path, tail: str, **objects: bytes) -> str:
    uri = f"file://{tmp_path}/storage"
    for name, data in objects.items():
        open_store(uri).write_bytes(f"runs/r1/{name.replace('_', '.')}", data)
    found = stored_log.find_in(storage_layout.run_uri(uri, "r1"))
    assert found is not None
    out = io.StringIO()
    stored_log.show(found, tail, LogLines(out, cap=CAP))
    return out.getvalue()


@pytest.mark.parametrize(
    ("tail", "shown"),
    [
        ("all", "one\ntwo\nthree\nfour\n"),
        ("2", "three\nfour\n"),
        ("4", "one\ntwo\nthree\nfour\n"),
        ("9", "one\ntwo\nthree\nfour\n"),
        ("0", ""),
    ],
)
def test_a_tail_is_the_last_lines_of_the_rotated_part_then_the_log(tmp_path, tail, shown):
    assert _shown(tmp_path, tail, train_log_1=b"one\ntwo\n", train_log=b"three\nfour\n") == shown


def test_a_log_whose_last_line_has_no_newline_ends_with_one(tmp_path):
    assert _shown(tmp_path, "2", train_log=b"a\nb\nc") == "b\nc\n"


def test_a_line_past_its_cap_is_cut_and_said(tmp_path):
    shown = _shown(tmp_path, "all", train_log=b"short\n" + b"y" * 25 + b"\nend\n")
    assert shown == "short\nyyyyyyyyyy [… line cut: 15 more characters not shown]\nend\n"


def test_a_tail_reads_back_no_further_than_its_share_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(stored_log, "READ_BLOCK_BYTES", 4)
    monkeypatch.setattr(stored_log, "LINE_BYTES", 4)
    shown = _shown(tmp_path, "1", train_log=b"head\n" + b"z" * 100)
    assert shown.startswith(f"{stored_log.NOT_READ}\nzzzzz")  # its start was never read
    assert shown.count("\n") == 2


def test_escapes_in_a_stored_log_are_letters(tmp_path):
    shown = _shown(tmp_path, "all", train_log=b"\x1b[2Jok\r\n\xff\n")
    assert shown == "\\x1b[2Jok\\x0d\n\ufffd\n"


def test_a_run_without_a_stored_log_has_none(tmp_path):
    assert stored_log.find_in(storage_layout.run_uri(f"file://{tmp_path}/storage", "r1")) is None
