"""Tiny datasets and runs shared by the trainer tests (resnet18, a few steps)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.checkpoints import checkpoint_file
from trainer.config import DataConfig, ModelConfig, RunConfig, SynthConfig, TrainConfig
from trainer.data.synth import synthesize

TINY_CASES = 5
TINY_WINDOWS_PER_CASE = 48
TINY_WINDOW_LENGTH = 64

# One intra-op thread: the suite shares 2 cores with other test processes, and
# oversubscribed OpenMP threads spin-wait each other into the ground.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-data")
    return synthesize(SynthConfig(out, TINY_CASES, TINY_WINDOWS_PER_CASE, TINY_WINDOW_LENGTH, 0))


def tiny_state(step: int = 3, epoch: int = 0, run_id: str = "run") -> dict:
    """A checkpoint dict with every key of the right kind, tiny tensors for weights,
    saved by a run whose run dir is named `run_id`."""
    return {
        **{key: {} for key in checkpoint_file.STATE_KEYS},
        "model": {"w": torch.arange(4.0) + step},
        "scaler": None,
        "step": step,
        "epoch": epoch,
        "step_in_epoch": 0,
        "epochs_without_improvement": 0,
        "config": {"seed": 1, "train": {"run_dir": f"/workspace/runs/{run_id}"}},
        "best_val_mae": 1.0,
        "dataset_fingerprint": "data",
    }


def tiny_run_config(data: Path, run_dir: Path, **train_overrides) -> RunConfig:
    train = {"epochs": 2, "batch_size": 32, "log_every_steps": 1, **train_overrides}
    return RunConfig(
        data=DataConfig(data),
        train=TrainConfig(run_dir=run_dir, **train),
        model=ModelConfig(arch="resnet18"),
    )


@pytest.fixture(scope="session")
def trained_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.loop.train import train

    run_dir = tmp_path_factory.mktemp("runs") / "tiny-run"
    assert train(tiny_run_config(tiny_data, run_dir)) == 0
    return run_dir
