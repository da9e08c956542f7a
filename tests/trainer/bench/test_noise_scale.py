"""`python -m trainer bench --noise-scale RUN_DIR` (`trainer.bench.noise_scale`): the
estimator recovers a known gradient and noise, and the bench measures a run's
checkpoints without touching them (tiny, on the CPU)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.trainer_process import output_of, start_training, wait_for_exit
from trainer.__main__ import main
from trainer.bench.noise_scale import SIZES, checkpoints_of, estimate
from trainer.config import UserError


def test_the_estimate_recovers_a_known_gradient_and_noise():
    # Per-window gradients G + noise of variance sigma2 in each of d coordinates:
    # tr(Σ) = d sigma2 = 1000, |G|² = 2, B_simple = 500 windows.
    rng = np.random.default_rng(0)
    d, sigma2, small, parts = 200, 5.0, 8, 16
    true_g = np.full(d, 0.1)
    small_sq, big_sq = [], []
    for _ in range(400):
        windows = true_g + rng.normal(0.0, np.sqrt(sigma2), size=(small * parts, d))
        batches = windows.reshape(parts, small, d).mean(axis=1)
        small_sq.append(float((batches**2).sum(axis=1).mean()))
        big_sq.append(float((batches.mean(axis=0) ** 2).sum()))
    gradient_sq, trace = estimate(small_sq, big_sq, small, small * parts)
    assert gradient_sq == pytest.approx(2.0, rel=0.1)
    assert trace == pytest.approx(1000.0, rel=0.05)
    assert trace / gradient_sq == pytest.approx(500, rel=0.1)


def test_up_to_so_many_checkpoints_are_measured_first_and_last_among_them(tmp_path: Path):
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    for step in range(1, 11):
        (directory / f"step-{step:09d}-epoch-{step:04d}.pt").touch()
    picked = [path.name[5:14] for path in checkpoints_of(tmp_path, 3)]
    assert picked == ["000000001", "000000005", "000000010"]


def test_a_run_dir_without_checkpoints_is_one_line_naming_what_was_expected(tmp_path: Path):
    with pytest.raises(
        UserError, match=r"no checkpoints under .* expected a run dir `train` wrote"
    ):
        checkpoints_of(tmp_path, 3)


@pytest.mark.e2e
def test_the_bench_measures_a_tiny_runs_checkpoints_and_leaves_them_as_they_were(
    tiny_data: Path, tmp_path: Path, capsys
):
    run_dir = tmp_path / "run"
    process = start_training(tiny_data, run_dir, "--batch-size", "16", "--epochs", "2")
    assert wait_for_exit(process, run_dir) == 0, output_of(run_dir)
    saved = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.rglob("*.pt")}
    assert main(["bench", "--noise-scale", str(run_dir), "--quick", "--json"]) == 0
    estimates = json.loads(capsys.readouterr().out)["estimates"]
    quick = SIZES["quick"]
    assert [e["epoch"] for e in estimates] == [1, 2]
    for e in estimates:
        assert (e["small_batch"], e["big_batch"], e["draws"]) == (
            quick.small,
            quick.small * quick.parts,
            quick.draws,
        )
        assert e["trace_sigma"] > 0 and np.isfinite(e["gradient_sq"])
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.rglob("*.pt")} == saved
