import pytest
import torch

from trainer import checkpoint
from trainer.checkpoint import CheckpointConfig, CheckpointError, CheckpointManager


def _state(step=3):
    state = dict.fromkeys(checkpoint.STATE_KEYS)
    state.update(model={"w": torch.arange(4.0)}, step=step, config={"seed": 1})
    return state


def test_save_writes_file_and_sha256_sidecar_and_no_temp(tmp_path):
    digest = checkpoint.save(tmp_path / "last.pt", _state())
    assert (tmp_path / "last.pt.sha256").read_text() == f"{digest}  last.pt\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "last.pt.sha256"]


def test_saved_state_loads_with_weights_only(tmp_path):
    checkpoint.save(tmp_path / "c.pt", _state())
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert torch.equal(raw["model"]["w"], torch.arange(4.0))


def test_damaged_checkpoint_is_refused(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.save(path, _state())
    with path.open("r+b") as handle:
        handle.seek(40)
        handle.write(b"\x00garbage")
    with pytest.raises(CheckpointError, match="sha256"):
        checkpoint.load(path)


def test_manager_falls_back_to_best_when_last_is_damaged(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    manager.save_best(_state(step=2))
    manager.save_last(_state(step=5))
    manager.last_path.write_bytes(b"truncated")
    assert manager.load_latest()["step"] == 2


def test_manager_without_checkpoints_means_fresh_start(tmp_path):
    assert CheckpointManager(CheckpointConfig(tmp_path)).load_latest() is None


def test_step_policy_says_when_a_save_is_due(tmp_path):
    manager = CheckpointManager(CheckpointConfig(tmp_path, every_seconds=0, every_steps=4))
    assert [manager.due(step) for step in (1, 3, 4)] == [False, False, True]
