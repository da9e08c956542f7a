"""A bucket writer (anything on the box) against resume and `evaluate`: keys that climb
out of the run dir, planted pointers and checkpoints, torn objects; on a directory
store, moto S3 and Azurite."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import pytest

from tests.fixtures.object_store import plant_hostile_keys
from tests.trainer.conftest import tiny_run_config, tiny_state
from trainer.checkpoints import checkpoint_file, layout
from trainer.checkpoints.resume import find_newest
from trainer.config import UserError
from trainer.loop.train import train
from trainer.storage import open_store

PLANTED = "step-999999999-epoch-0000.pt"


def _fits(_state):
    return None


def _upload(store, state: dict, directory: Path, name: str | None = None) -> str:
    """Save `state` as the trainer would and upload it (object, hash, LATEST)."""
    name = name or checkpoint_file.checkpoint_name(state)
    path = directory / "outgoing" / name
    digest = checkpoint_file.save(path, state)
    layout.upload_checkpoint(store, name, path, digest)
    layout.set_pointer(store, layout.LATEST_KEY, name)
    return name


def _files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


def test_restore_from_the_store_refuses_keys_that_climb_out(
    store_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"{store_uri}/r1")
    _upload(store, tiny_state(step=1, run_id="r1"), tmp_path)
    store.write_bytes("metrics.jsonl", b'{"kind": "train", "step": 1}\n')
    store.write_bytes("launch.json", b'{"image": "--privileged"}')  # the box's own record
    hostile = plant_hostile_keys(store.uri)
    run_dir = tmp_path / "box" / "runs" / "r1"
    before = _files_under(tmp_path)
    with caplog.at_level(logging.WARNING):
        found = find_newest(run_dir / "checkpoints", store, _fits)
    assert found is not None and found.state["step"] == 1
    written = _files_under(tmp_path) - before
    assert all(run_dir in path.parents for path in written), written
    assert (run_dir / "metrics.jsonl").is_file()
    assert not (run_dir / "launch.json").exists()
    for key in hostile:
        assert f"refused object key {key!r}" in caplog.text


def test_restore_never_makes_the_boxs_own_files_not_even_as_directories(
    store_uri: str, tmp_path: Path
) -> None:
    # A key under STOPPED_BY_USER/ would make a directory of that name, and the box's
    # resume unit takes any entry of that name for the user's stop: no resume, ever.
    store = open_store(f"{store_uri}/r1")
    _upload(store, tiny_state(step=1, run_id="r1"), tmp_path)
    for key in ("STOPPED_BY_USER/x", "launch.json/x", "metrics.jsonl"):
        store.write_bytes(key, b"{}\n")
    run_dir = tmp_path / "box" / "runs" / "r1"
    assert find_newest(run_dir / "checkpoints", store, _fits).state["step"] == 1
    assert (run_dir / "metrics.jsonl").is_file()  # the run's own files come back
    assert not os.path.lexists(run_dir / "STOPPED_BY_USER")
    assert not os.path.lexists(run_dir / "launch.json")


@pytest.mark.parametrize("pointer", ["../../../../escape.pt", "/tmp/x.pt", "step-1.pt\n../x"])
def test_evaluate_never_uses_a_planted_pointer_as_a_file_name(
    store_uri: str, tmp_path: Path, pointer: str
) -> None:
    store = open_store(f"{store_uri}/r1")
    for key in (layout.BEST_KEY, layout.LATEST_KEY):
        store.write_bytes(key, pointer.encode())
    with pytest.raises(UserError, match="no BEST or LATEST checkpoint"):
        checkpoint_file.resolve_local(store.uri)


def test_a_planted_newer_step_file_with_a_matching_record_is_not_a_candidate(
    store_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"{store_uri}/r1")
    _upload(store, tiny_state(step=2), tmp_path)
    planted = tmp_path / "planted" / PLANTED
    layout.upload_checkpoint(
        store, PLANTED, planted, checkpoint_file.save(planted, tiny_state(999999999))
    )
    with caplog.at_level(logging.INFO):
        found = find_newest(tmp_path / "run" / "checkpoints", store, _fits)
    assert found.state["step"] == 2
    assert "resuming from step-000000002-epoch-0000.pt from" in caplog.text
    assert PLANTED not in caplog.text  # never fetched, never considered


def test_latest_pointing_at_a_checkpoint_whose_name_lies_falls_back(
    store_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"{store_uri}/r1")
    _upload(store, tiny_state(step=2), tmp_path)
    _upload(store, tiny_state(step=2), tmp_path, name=PLANTED)  # a copy under a bigger name
    with caplog.at_level(logging.INFO):
        found = find_newest(tmp_path / "run" / "checkpoints", store, _fits)
    assert found.path.name == "step-000000002-epoch-0000.pt"
    assert f"it holds step 2, epoch 0 ({PLANTED} says otherwise)" in caplog.text
    assert not (tmp_path / "run" / "checkpoints" / PLANTED).exists()  # fetched, then dropped


def test_the_run_dirs_checkpoint_wins_when_as_new_as_the_stores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"file://{tmp_path}/store/r1")
    local = tmp_path / "run" / "checkpoints"
    name = _upload(store, tiny_state(step=4), tmp_path)
    checkpoint_file.save(local / name, tiny_state(step=4))
    with caplog.at_level(logging.INFO):
        found = find_newest(local, store, _fits)
    assert found.path == local / name and found.in_store
    assert f"{name} from the run dir: as new as the store's LATEST {name}" in caplog.text


def test_torn_pointer_and_torn_record_are_skipped_not_trusted(
    store_uri: str, tmp_path: Path
) -> None:
    store = open_store(f"{store_uri}/r1")
    first = _upload(store, tiny_state(step=1), tmp_path)
    second = _upload(store, tiny_state(step=2), tmp_path)
    store.write_bytes(layout.checkpoint_key(second) + layout.HASH_SUFFIX, b"3f1a9c")  # torn
    assert find_newest(tmp_path / "run" / "checkpoints", store, _fits).path.name == first
    store.write_bytes(layout.LATEST_KEY, b"step-0000000")  # torn mid-write
    assert find_newest(tmp_path / "again" / "checkpoints", store, _fits) is None


@pytest.mark.e2e
def test_a_forged_checkpoint_beyond_the_run_does_not_win_a_resume(
    tiny_data: Path, tmp_path: Path, store_uri: str, capsys: pytest.CaptureFixture, caplog
) -> None:
    uri, run_dir = f"{store_uri}/tiny", tmp_path / "tiny"
    config = dataclasses.replace(
        tiny_run_config(tiny_data, run_dir, max_steps=3), checkpoint_uri=uri
    )
    assert train(config) == 0
    store = open_store(uri)
    legit = checkpoint_file.load(run_dir / "checkpoints" / "last.pt")
    # Everything a bucket writer can read (config, fingerprint) is right; only the
    # position is made up, and the name and its record agree with it.
    _upload(store, {**legit, "step": 999999999}, tmp_path, name=PLANTED)
    shutil.rmtree(run_dir)  # a new box resumes from the store alone
    with caplog.at_level(logging.WARNING):
        assert train(config) == 0
    assert "resume: step 3," in capsys.readouterr().out
    assert "lie beyond this run's" in caplog.text


def test_a_run_dir_checkpoint_refused_for_the_run_stays_and_the_resume_is_refused(
    tmp_path: Path,
) -> None:
    store = open_store(f"file://{tmp_path}/store/r1")
    local = tmp_path / "run" / "checkpoints"
    name = _upload(store, tiny_state(step=2), tmp_path)
    checkpoint_file.save(local / name, tiny_state(step=2))

    def other_flags(_state):
        return "train.batch_size was 32 in the run dir's checkpoint, now 64"

    with pytest.raises(UserError, match=r"resume: train\.batch_size was 32"):
        find_newest(local, store, other_flags)
    assert checkpoint_file.load(local / name, require_record=True)["step"] == 2


def test_a_checkpoint_of_another_run_in_the_store_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"file://{tmp_path}/store/runs/run")
    _upload(store, tiny_state(step=2, run_id="someone-else"), tmp_path)
    with caplog.at_level(logging.WARNING), pytest.raises(UserError, match="another --checkpoint"):
        find_newest(tmp_path / "run" / "checkpoints", store, _fits)
    assert "it belongs to run 'someone-else', not 'run'" in caplog.text


def test_a_run_dir_copied_under_another_name_resumes_from_its_own_files(tmp_path: Path) -> None:
    local = tmp_path / "copy-of-run" / "checkpoints"
    checkpoint_file.save(local / "step-000000002-epoch-0000.pt", tiny_state(step=2, run_id="run"))
    assert find_newest(local, None, _fits).state["step"] == 2
