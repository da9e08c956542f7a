"""The one rule that turns an object key into a local path (trainer.storage.local_paths)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.storage.local_paths import UnsafeKey, local_path


@pytest.mark.parametrize(
    "key",
    [
        "../escape.txt",
        "tb/../../escape.txt",
        "..",
        "/etc/passwd",
        "..\\..\\win.txt",
        "tb\\evil",
        "a//b",
        "a/./b",
        "trailing/",
        "",
        "new\nline",
        "nul\x00byte",
    ],
)
def test_a_key_that_could_climb_out_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(UnsafeKey, match="refused object key"):
        local_path(tmp_path / "run", key)


@pytest.mark.parametrize("key", ["metrics.jsonl", "tb/events.out.1", "plots/a..b.png", ".hidden"])
def test_a_plain_relative_key_maps_under_the_root(tmp_path: Path, key: str) -> None:
    assert local_path(tmp_path / "run", key) == tmp_path / "run" / key


def test_a_key_through_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "tb")
    with pytest.raises(UnsafeKey, match="outside"):
        local_path(root, "tb/events.out.1")


def test_a_key_naming_a_symlinked_file_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    (tmp_path / "secret").write_text("not the run's\n")
    os.symlink(tmp_path / "secret", root / "metrics.jsonl")
    with pytest.raises(UnsafeKey, match="outside"):
        local_path(root, "metrics.jsonl")
