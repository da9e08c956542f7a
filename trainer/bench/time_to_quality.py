"""`python -m trainer bench --time-to-quality`: how long the default `train` takes to
reach a model as good as today's default reached, counted from the process's start.

Faster windows/s must not buy worse models: larger batches take fewer, larger steps.
So this trains with every default (batch, learning rate, warm-up, the captured step,
the formulation timing: all counted) on fixed synthetic data and split (the seed's),
and reports the wall time from the process's start (Python and torch's imports too) to
the first validation at or below `TARGET_MAE` for the data: the best validation MAE the
trainer's default before the batch grew with the data (batch 1024 a GPU, 256 on a CPU,
eager steps) reached on the same data, plus `TOLERANCE`.

Two sizes: `tiny` (the CPU's, in the test suite) and `m2` (M2-sized: 240 cases x
10,000 windows, the GPU's). A target not measured on this size is not invented: the
bench then reports the run's best MAE and the time to it, and says the target is
missing (`--target-mae` gives one).

`--batch-size` trains at another global batch than the default's (is a larger batch
worth its fewer steps?); `--nproc N` trains under torchrun with N ranks (N GPUs, or N
gloo processes on a CPU), their start and the process group's counted too: one rank
on a GPU takes the data-parallel step, its NCCL all-reduce captured with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from box.contract import RunSummary
from trainer.config import DataConfig, RunConfig, SynthConfig, TrainConfig, UserError
from trainer.data.synth import synthesize
from trainer.loop.defaults import per_rank_batch, train_windows_of
from trainer.reports.progress import read_metrics

# name: (cases, windows per case, epochs)
SIZES = {"tiny": (10, 100, 8), "m2": (240, 10_000, 20)}
# The best validation MAE (mg/dL) of the default before this change on each size's
# data: tiny measured on a CPU (main at fab8f01: 31.93, test MAE 26.45); m2 not
# measured (no GPU at hand).
TARGET_MAE: dict[str, float] = {"tiny": 31.93}
TOLERANCE = 0.03  # the bound: the full schedule within 3% of today's default
# Bounds a torchrun-launched run: M2 on a V100 (~100 k windows/s) takes ~10 minutes.
TORCHRUN_TIMEOUT_S = 2 * 3600


def process_started_at() -> float:
    """When this process started (unix s), from the kernel's record of it."""
    with open("/proc/self/stat") as f:
        after_name = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(after_name[19])  # field 22, counted from the state (field 3)
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


def time_to_quality(
    size: str,
    target_mae: float | None,
    work_dir: Path,
    batch_size: int | None = None,
    nproc: int | None = None,
) -> dict[str, Any]:
    """Synthesize `size`'s data in `work_dir`, train on it with the defaults (at
    `batch_size`, under torchrun with `nproc` ranks when given), and say when the first
    validation at or below the target came."""
    cases, per_case, epochs = SIZES[size]
    data = synthesize(SynthConfig(work_dir / "data", cases, per_case))
    run_dir = work_dir / "run"
    if nproc is not None and batch_size is None:
        batch_size = _one_rank_batch(cases * per_case)
    train_config = TrainConfig(run_dir, epochs=epochs, patience=epochs, batch_size=batch_size)
    config = RunConfig(DataConfig(data), train_config)
    started = process_started_at()
    if _train(config, nproc) != 0:
        raise UserError(f"time-to-quality: the run in {run_dir} did not finish")
    target = target_mae if target_mae is not None else TARGET_MAE.get(size)
    epochs_seen = [r for r in read_metrics(run_dir) if r.get("kind") == "epoch"]
    best = min(epochs_seen, key=lambda r: r["val_mae"])
    bound = None if target is None else target * (1 + TOLERANCE)
    reached = [r for r in epochs_seen if bound is not None and r["val_mae"] <= bound]
    first = reached[0] if reached else None
    summary = RunSummary.read(run_dir)
    return {
        "size": size,
        "windows": cases * per_case,
        "target_mae": target,
        "bound_mae": bound,
        "reached": first is not None,
        "seconds_to_target": first["time"] - started if first else None,
        "epoch_at_target": first["epoch"] if first else None,
        "best_val_mae": best["val_mae"],
        "seconds_to_best": best["time"] - started,
        "test_mae": summary.test["mae"],
        "wall_s": time.time() - started,
        "batch_size": summary.global_batch_size,
        "lr": summary.lr,
        "world_size": summary.world_size,
        "device": summary.device,
    }


def _one_rank_batch(windows: int) -> int:
    """The global batch one rank takes by default for `windows`: what N ranks train at
    here, so that they and one rank learn from the same batches. (On a GPU the default
    global batch hardly changes with the ranks; on a CPU each rank takes 256, and two
    ranks of the tiny size would make 2 steps an epoch.)"""
    import torch

    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return per_rank_batch(device_type, train_windows_of(windows))


def _train(config: RunConfig, nproc: int | None) -> int:
    """`train` in this process, or under torchrun with `nproc` ranks; its exit code."""
    if nproc is None:
        from trainer.loop.train import train  # torch: only when the bench runs

        return train(config)
    tc = config.train
    flags = ["--data", str(config.data.data_dir), "--run-dir", str(tc.run_dir)]
    flags += ["--epochs", str(tc.epochs), "--patience", str(tc.patience)]
    flags += ["--batch-size", str(tc.batch_size)] if tc.batch_size else []
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    command = [sys.executable, *launcher, "-m", "trainer", "train", *flags]
    try:
        return subprocess.run(command, timeout=TORCHRUN_TIMEOUT_S, check=False).returncode
    except subprocess.TimeoutExpired:
        raise UserError(
            f"time-to-quality: {nproc} ranks did not finish within {TORCHRUN_TIMEOUT_S} s"
        ) from None


def run_time_to_quality(
    size: str,
    target_mae: float | None,
    json_output: bool,
    batch_size: int | None = None,
    nproc: int | None = None,
) -> int:
    with tempfile.TemporaryDirectory(prefix="time-to-quality-") as work:
        result = time_to_quality(size, target_mae, Path(work), batch_size, nproc)
    if json_output:
        print(json.dumps(result, indent=2))
    elif result["target_mae"] is None:
        print(
            f"time to quality ({size}): no target measured for this size (pass --target-mae); "
            f"best val MAE {result['best_val_mae']:.2f} after {result['seconds_to_best']:.1f} s"
        )
    else:
        when = (
            f"{result['seconds_to_target']:.1f} s (epoch {result['epoch_at_target']})"
            if result["reached"]
            else "not reached"
        )
        print(
            f"time to quality ({size}, val MAE <= {result['bound_mae']:.2f}): {when}; best "
            f"{result['best_val_mae']:.2f}, test {result['test_mae']:.2f}, batch "
            f"{result['batch_size']} on {result['world_size']} rank(s), lr {result['lr']:.3g}, "
            f"wall {result['wall_s']:.1f} s"
        )
    return 0
