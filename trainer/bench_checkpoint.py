"""`python -m trainer bench-checkpoint --uri URI`: what checkpointing costs.

1. Save + synchronous upload of the full ResNet34-1D training state (weights, AdamW
   moments, RNG, config...: ~87 MB), `--repeats` times, through the trainer's own
   CheckpointManager: the time a spot notice needs. Budget: 25 s, inside Azure's 30.
2. Unless `--upload-only`: training-step throughput with a checkpoint every
   `--every` seconds (30) uploaded to URI, against no checkpoints, in alternating
   rounds so that other load on the machine hits both arms alike. Each checkpointing
   round saves at its start and then on the timer, so a round of 60 s holds two
   saves and their uploads finish inside the round that caused them.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trainer import checkpoint
from trainer.checkpoint import CheckpointConfig, CheckpointManager
from trainer.config import ModelConfig, UserError
from trainer.device import choose_device
from trainer.model import build_model

CHECKPOINT_BUDGET_SECONDS = 25.0
REQUIRED_THROUGHPUT_RATIO = 0.97
WINDOW_LENGTH = 100
CPU_BATCH_SIZE = 256
GPU_BATCH_SIZE = 1024
UPLOAD_TIMEOUT_SECONDS = 120.0


class _Trainer:
    """The real model, optimizer and step on synthetic batches (no data set needed)."""

    def __init__(self, batch_size: int | None) -> None:
        self.choice = choose_device("auto")
        torch.manual_seed(0)
        self.model = build_model(ModelConfig("resnet34")).to(self.choice.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        default = GPU_BATCH_SIZE if self.choice.device.type == "cuda" else CPU_BATCH_SIZE
        self.batch_size = batch_size or default
        self.x = torch.randn(self.batch_size, 1, WINDOW_LENGTH, device=self.choice.device)
        self.y = torch.randn(self.batch_size, device=self.choice.device)
        self.steps = 0
        self.step()  # AdamW creates its moments on the first step: the state's full size

    def step(self) -> int:
        with self.choice.autocast():
            loss = F.smooth_l1_loss(self.model(self.x).float(), self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return self.batch_size

    def sync(self) -> None:
        if self.choice.device.type == "cuda":
            torch.cuda.synchronize()

    def state(self) -> dict[str, Any]:
        """Every key a real checkpoint has, at its real size where size matters."""
        state = dict.fromkeys(checkpoint.STATE_KEYS, 0)
        state.update(
            model=self.model.state_dict(),
            optimizer=self.optimizer.state_dict(),
            step=self.steps,
            rng=checkpoint.capture_rng(),
            config={"model": {"arch": "resnet34"}},
            best_val_mae=math.inf,
        )
        return state


def measure_upload(trainer: _Trainer, manager: CheckpointManager, repeats: int) -> dict:
    """Seconds for save (blocking the loop) and for save + upload, per repeat."""
    save_s, total_s = [], []
    for _ in range(repeats):
        trainer.step()
        trainer.sync()
        started = time.perf_counter()
        path = manager.save_last(trainer.state())
        saved = time.perf_counter()
        if not manager.flush(UPLOAD_TIMEOUT_SECONDS):
            raise UserError(f"--uri {manager.config.uri}: upload did not finish; is it reachable?")
        total_s.append(time.perf_counter() - started)
        save_s.append(saved - started)
    return {
        "state_mb": path.stat().st_size / 1e6,
        "save_s": save_s,
        "save_and_upload_s": total_s,
        "save_and_upload_max_s": max(total_s),
    }


def measure_overhead(
    trainer: _Trainer, manager: CheckpointManager, round_s: float, rounds: int
) -> dict:
    """Windows/s without and with checkpoints, from alternating rounds."""
    windows = {"none": 0, "checkpointing": 0}
    seconds = {"none": 0.0, "checkpointing": 0.0}
    saves = 0
    for index in range(rounds):
        arm = "none" if index % 2 == 0 else "checkpointing"
        trainer.sync()
        started = time.perf_counter()
        if arm == "checkpointing":
            manager.save_last(trainer.state())
            saves += 1
        while time.perf_counter() - started < round_s:
            windows[arm] += trainer.step()
            if arm == "checkpointing" and manager.due(trainer.steps):
                manager.save_last(trainer.state())
                saves += 1
        trainer.sync()
        seconds[arm] += time.perf_counter() - started
        if arm == "checkpointing" and not manager.flush(UPLOAD_TIMEOUT_SECONDS):
            raise UserError(f"--uri {manager.config.uri}: uploads fell behind by minutes")
    rates = {arm: windows[arm] / seconds[arm] for arm in windows}
    return {
        "windows_per_s_without": rates["none"],
        "windows_per_s_with": rates["checkpointing"],
        "throughput_ratio": rates["checkpointing"] / rates["none"],
        "checkpoints_saved": saves,
        "round_s": round_s,
        "rounds": rounds,
    }


def run_bench_checkpoint(
    uri: str,
    *,
    every_seconds: float = 30.0,
    round_seconds: float = 60.0,
    rounds: int = 4,
    repeats: int = 3,
    upload_only: bool = False,
    batch_size: int | None = None,
    json_output: bool = False,
) -> int:
    if rounds < 2 or rounds % 2:
        raise UserError(f"--rounds {rounds}: need an even number >= 2 (the arms alternate)")
    trainer = _Trainer(batch_size)
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        config = CheckpointConfig(Path(tmp) / "run" / "checkpoints", every_seconds, None, uri)
        manager = CheckpointManager(config)
        try:
            result: dict[str, Any] = {"uri": uri, "device": trainer.choice.description}
            result |= measure_upload(trainer, manager, repeats)
            if not upload_only:
                result["checkpoint_every_s"] = every_seconds
                result |= measure_overhead(trainer, manager, round_seconds, rounds)
        finally:
            manager.close(UPLOAD_TIMEOUT_SECONDS)
    _print(result, json_output)
    return 0


def _print(result: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print(json.dumps(result, indent=2))
        return
    uploads = ", ".join(f"{s:.1f}" for s in result["save_and_upload_s"])
    verdict = "within" if result["save_and_upload_max_s"] <= CHECKPOINT_BUDGET_SECONDS else "OVER"
    print(
        f"checkpoint of {result['state_mb']:.0f} MB to {result['uri']}: save "
        f"{statistics.median(result['save_s']):.2f} s, save + upload {uploads} s "
        f"({verdict} the {CHECKPOINT_BUDGET_SECONDS:.0f} s budget)"
    )
    if "throughput_ratio" in result:
        ratio = result["throughput_ratio"]
        verdict = "meets" if ratio >= REQUIRED_THROUGHPUT_RATIO else "BELOW"
        print(
            f"throughput: {result['windows_per_s_without']:,.0f} windows/s without, "
            f"{result['windows_per_s_with']:,.0f} with a checkpoint every "
            f"{result['checkpoint_every_s']:.0f} s: ratio {ratio:.3f} "
            f"({verdict} the {REQUIRED_THROUGHPUT_RATIO} target)"
        )
