import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.conftest import tiny_state
from trainer.__main__ import main
from trainer.checkpoints import checkpoint_file
from trainer.checkpoints.checkpoint_file import CheckpointError
from trainer.checkpoints.manager import CheckpointConfig, CheckpointManager
from trainer.config import UserError

WRITE_SECONDS = 30


def _state(step=3, epoch=0):
    return tiny_state(step, epoch)


def _fits(_state):
    return None


def _step_files(directory):
    return sorted(p.name for p in directory.glob("step-*.pt"))


def test_save_writes_file_and_sha256_sidecar_and_no_temp(tmp_path):
    digest = checkpoint_file.save(tmp_path / "last.pt", _state())
    assert (tmp_path / "last.pt.sha256").read_text() == f"{digest}  last.pt\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "last.pt.sha256"]


def test_the_hash_record_is_in_place_before_the_checkpoint_appears(tmp_path, monkeypatch):
    renamed = []
    replace = os.replace

    def recording_replace(source, target):
        renamed.append(Path(target).name)
        replace(source, target)

    monkeypatch.setattr(os, "replace", recording_replace)
    checkpoint_file.save(tmp_path / "c.pt", _state())
    assert renamed == ["c.pt.sha256", "c.pt"]


def test_saved_state_loads_with_weights_only(tmp_path):
    checkpoint_file.save(tmp_path / "c.pt", _state())
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert torch.equal(raw["model"]["w"], torch.arange(4.0) + 3)


def test_damaged_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint_file.save(path, _state())
    with path.open("r+b") as handle:
        handle.seek(40)
        handle.write(b"\x00garbage")
    with pytest.raises(CheckpointError, match="sha256"):
        checkpoint_file.load(path)


def test_manager_keeps_the_last_k_step_files_and_best(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path, keep_last=2))
    manager.save_best(_state(step=1))
    for step in (2, 3, 4):
        manager.save_last(_state(step=step))
    assert manager.flush(WRITE_SECONDS)
    assert _step_files(tmp_path) == ["step-000000003-epoch-0000.pt", "step-000000004-epoch-0000.pt"]
    assert checkpoint_file.load(manager.best_path)["step"] == 1
    assert checkpoint_file.load(manager.last_path)["step"] == 4


def test_best_then_last_of_one_state_writes_one_file(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    state = _state(step=5, epoch=1)
    manager.save_best(state)
    manager.save_last(state)
    assert manager.flush(WRITE_SECONDS)
    assert _step_files(tmp_path) == ["step-000000005-epoch-0001.pt"]
    assert manager.best_path.samefile(manager.last_path)


def test_damaged_newest_falls_back_to_the_previous_with_a_warning(tmp_path, caplog):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    for step in (1, 2):
        manager.save_last(_state(step=step))
    assert manager.flush(WRITE_SECONDS)
    newest = tmp_path / "step-000000002-epoch-0000.pt"
    newest.write_bytes(newest.read_bytes()[:-10])  # in place: last.pt shares the file
    with caplog.at_level(logging.WARNING):
        state = CheckpointManager(CheckpointConfig(tmp_path)).load_latest(_fits)
    assert state["step"] == 1
    assert "skipping damaged" in caplog.text
    assert (tmp_path / "step-000000002-epoch-0000.pt.damaged").exists()


def test_manager_falls_back_to_best_when_every_step_file_is_damaged(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    manager.save_best(_state(step=2))
    manager.save_last(_state(step=5))
    assert manager.flush(WRITE_SECONDS)
    best_copy = tmp_path / "best-copy.pt"
    best_copy.write_bytes(manager.best_path.read_bytes())
    for path in tmp_path.glob("step-*.pt"):
        path.write_bytes(b"truncated")
    manager.best_path.unlink()
    best_copy.rename(manager.best_path)  # best.pt kept its own good copy
    assert manager.load_latest(_fits)["step"] == 2


def test_resume_mends_a_best_record_left_stale_by_a_kill_while_linking(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    manager.save_best(_state(step=1))
    assert manager.flush(WRITE_SECONDS)
    stale_record = checkpoint_file.sidecar_path(manager.best_path).read_text()
    manager.save_best(_state(step=2))
    assert manager.flush(WRITE_SECONDS)
    # Killed after best.pt was renamed into place, before its record followed:
    checkpoint_file.sidecar_path(manager.best_path).write_text(stale_record)
    resumed = CheckpointManager(CheckpointConfig(tmp_path))
    resumed.load_latest(_fits)
    assert resumed.load_best()["step"] == 2


def test_saved_state_is_the_state_at_save_time_not_later(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    state = _state(step=3)
    manager.save_last(state)
    state["model"]["w"].add_(100)  # the optimizer updates weights in place
    assert torch.equal(manager.load_best()["model"]["w"], torch.arange(4.0) + 3)


def test_flush_without_a_store_returns_once_the_checkpoint_is_on_disk(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    path = manager.save_last(_state(step=7))
    assert manager.flush(WRITE_SECONDS)
    assert checkpoint_file.load(path)["step"] == 7
    assert manager.last_path.samefile(path)


def test_load_best_is_the_newest_checkpoint_until_one_is_best(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    manager.save_last(_state(step=1))
    assert manager.load_best()["step"] == 1
    manager.save_best(_state(step=2))
    manager.save_last(_state(step=3))
    assert manager.load_best()["step"] == 2


def test_a_failed_background_write_raises_at_the_next_flush(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    state = _state(step=1)
    state["config"] = lambda: None  # torch.save cannot pickle it
    manager.save_last(state)
    with pytest.raises(Exception, match="lambda"):
        manager.flush(WRITE_SECONDS)


def test_manager_without_checkpoints_means_fresh_start(tmp_path):
    assert CheckpointManager(CheckpointConfig(tmp_path)).load_latest(_fits) is None


def test_step_policy_says_when_a_save_is_due(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path, every_seconds=0, every_steps=4))
    assert [manager.due(step) for step in (1, 3, 4)] == [False, False, True]


def test_time_policy_says_when_a_save_is_due(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path, every_seconds=0.2))
    assert not manager.due(1)
    manager._last_save_monotonic -= 0.3
    assert manager.due(2)


def test_unknown_checkpoint_uri_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="--checkpoint-uri: storage URI 'gs://b'"):
        CheckpointManager(CheckpointConfig(tmp_path, uri="gs://b"))


def test_remote_checkpoint_argument_is_fetched_and_verified(tmp_path):
    run_uri = f"file://{tmp_path}/store/runs/r1"
    manager = CheckpointManager(CheckpointConfig(tmp_path / "run" / "checkpoints", uri=run_uri))
    manager.save_best(_state(step=1))
    manager.save_last(_state(step=2))
    assert manager.close(30)
    assert checkpoint_file.load(checkpoint_file.resolve_local(run_uri))["step"] == 1  # BEST
    named = f"{run_uri}/checkpoints/step-000000002-epoch-0000.pt"
    assert checkpoint_file.load(checkpoint_file.resolve_local(named))["step"] == 2


def _evaluate_error(tmp_path, checkpoint: str, capsys) -> str:
    """`evaluate --checkpoint` refused before it reads --data: its one line of stderr."""
    assert main(["evaluate", "--data", str(tmp_path), "--checkpoint", checkpoint]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "checkpoint",
    ["s3://nobucket/x.pt", "s3://b/runs/r1/checkpoints/best.pt", "az://a/c/last.pt"],
)
def test_a_checkpoint_uri_of_no_form_it_takes_is_one_line_naming_the_forms(
    tmp_path, capsys, checkpoint
):
    err = _evaluate_error(tmp_path, checkpoint, capsys)
    assert f"--checkpoint {checkpoint} is none of the forms it takes" in err
    assert all(form in err for form in ("a local .pt file", "a run's URI", "step-NNNNNNNNN"))
    assert "--checkpoint-uri" not in err


def test_a_run_uri_without_checkpoints_is_one_line_naming_the_forms(tmp_path, capsys):
    run_uri = f"file://{tmp_path}/store/runs/r1"
    err = _evaluate_error(tmp_path, run_uri, capsys)
    assert f"--checkpoint {run_uri}: no BEST or LATEST checkpoint there" in err
    assert "a checkpoint's URI" in err


def test_a_file_that_is_no_checkpoint_is_refused_without_torchs_weights_only_advice(
    tmp_path, capsys
):
    torch.save({"model": np.arange(3)}, tmp_path / "foreign.pt")  # needs numpy to unpickle
    err = _evaluate_error(tmp_path, str(tmp_path / "foreign.pt"), capsys)
    assert "not loadable (it needs numpy" in err and "weights only, never code" in err
    assert "weights_only=False" not in err and "`weights_only`" not in err


def test_a_checkpoint_holds_no_rng_state_per_visible_gpu():
    assert set(checkpoint_file.capture_rng()) == {"torch", "numpy", "python"}


def test_a_checkpoint_from_a_box_with_more_gpus_restores_on_this_one():
    # Written on a box whose container saw 8 GPUs (`--gpus all`): one state per GPU.
    eight_gpus = [torch.zeros(16, dtype=torch.uint8)] * 8
    state = {**checkpoint_file.capture_rng(), "cuda": eight_gpus}
    expected = torch.rand(3)
    torch.manual_seed(123)
    checkpoint_file.restore_rng(state)  # IndexError before, on a GPU box with fewer GPUs
    assert torch.equal(torch.rand(3), expected)
