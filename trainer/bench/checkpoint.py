"""`python -m trainer bench-checkpoint --uri URI`: what checkpointing costs.

1. Save + synchronous upload of the full ResNet34-1D training state (weights, AdamW
   moments, RNG, config...: ~87 MB), `--repeats` times, through the trainer's own
   CheckpointManager: the time a spot notice needs. Budget: 25 s, inside Azure's 30.
2. Unless `--upload-only`: training-step throughput with a checkpoint every
   `--every` seconds (30) uploaded to URI, against no checkpoints, in alternating
   rounds of `--round-seconds` (30) so that other load on the machine hits both arms
   alike. Each checkpointing round saves at its start and then on the timer while the
   round lasts, so a round of 30 s holds one save, and its write and upload run inside
   the round that caused it (the round's time includes waiting for them to finish, if
   it must).
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

from box.contract import CHECKPOINTS_DIR
from trainer.checkpoints import checkpoint_file
from trainer.checkpoints.manager import CheckpointConfig, CheckpointManager
from trainer.config import ModelConfig, UserError
from trainer.loop.defaults import per_rank_batch
from trainer.loop.device import choose_device
from trainer.model import build_model

CHECKPOINT_BUDGET_SECONDS = 25.0
REQUIRED_THROUGHPUT_RATIO = 0.97
WINDOW_LENGTH = 100
UPLOAD_TIMEOUT_SECONDS = 120.0


class _Trainer:
    """The real model, optimizer and step on synthetic batches (no data set needed)."""

    def __init__(self, batch_size: int | None) -> None:
        self.choice = choose_device("auto")
        torch.manual_seed(0)
        self.model = build_model(ModelConfig("resnet34"), self.choice.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.batch_size = batch_size or per_rank_batch(self.choice.device.type, 0)
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
        state = dict.fromkeys(checkpoint_file.STATE_KEYS, 0)
        state.update(
            model=self.model.state_dict(),
            optimizer=self.optimizer.state_dict(),
            step=self.steps,
            rng=checkpoint_file.capture_rng(),
            config={"model": {"arch": "resnet34"}},
            best_val_mae=math.inf,
        )
        return state


def measure_upload(trainer: _Trainer, manager: CheckpointManager, repeats: int) -> dict:
    """Seconds the save blocks the loop (the snapshot; the write is in the background)
    and seconds for save + write + upload, per repeat."""
    blocked_s, total_s, cpu_s = [], [], []
    for _ in range(repeats):
        trainer.step()
        trainer.sync()
        started, cpu_started = time.perf_counter(), time.process_time()
        path = manager.save_last(trainer.state())
        returned = time.perf_counter()
        if not manager.flush(UPLOAD_TIMEOUT_SECONDS):
            raise UserError(f"--uri {manager.config.uri}: upload did not finish; is it reachable?")
        total_s.append(time.perf_counter() - started)
        blocked_s.append(returned - started)
        # The training thread waits idle in flush: this is the save's and the upload
        # threads' CPU, whatever the neighbours on the machine are doing.
        cpu_s.append(time.process_time() - cpu_started)
    return {
        "state_mb": path.stat().st_size / 1e6,
        "loop_blocked_s": blocked_s,
        "save_and_upload_s": total_s,
        "save_and_upload_max_s": max(total_s),
        "save_and_upload_cpu_s": cpu_s,
    }


def _round(trainer: _Trainer, manager: CheckpointManager | None, round_s: float) -> tuple:
    """(windows, seconds, saves) of one round; with a manager, save at its start and
    whenever the timer says so before the round is over."""
    trainer.sync()
    started, windows, saves = time.perf_counter(), 0, 0
    if manager is not None:
        manager.save_last(trainer.state())
        saves += 1
    while time.perf_counter() - started < round_s:
        # Asked before the step, not after it: a save due after the round's last step
        # would be a second one in a round of `every` seconds, charged to this arm.
        if manager is not None and manager.due(trainer.steps):
            manager.save_last(trainer.state())
            saves += 1
        windows += trainer.step()
    trainer.sync()
    return windows, time.perf_counter() - started, saves


def _add(total: list, windows: int, seconds: float, cpu_seconds: float) -> None:
    total[0] += windows
    total[1] += seconds
    total[2] += cpu_seconds


def measure_overhead(
    trainer: _Trainer, manager: CheckpointManager, round_s: float, rounds: int
) -> dict:
    """Windows/s without and with checkpoints, from alternating rounds (pairs)."""
    # Per arm: windows, wall seconds, CPU seconds of this process (all its threads:
    # training, saving, uploading). On a shared machine the wall clock mostly measures
    # the neighbours; windows per CPU-second is what a dedicated box would turn into
    # throughput. The storage server's own CPU is not counted: in the cloud it is remote.
    totals = {"without": [0, 0.0, 0.0], "with": [0, 0.0, 0.0]}
    pair_ratios, saves = [], 0
    for _ in range(rounds // 2):
        cpu_started = time.process_time()
        windows, seconds, _ = _round(trainer, None, round_s)
        _add(totals["without"], windows, seconds, time.process_time() - cpu_started)
        without = windows / seconds
        cpu_started = time.process_time()
        windows, seconds, saved = _round(trainer, manager, round_s)
        flush_started = time.perf_counter()
        if not manager.flush(UPLOAD_TIMEOUT_SECONDS):
            raise UserError(f"--uri {manager.config.uri}: uploads fell behind by minutes")
        seconds += time.perf_counter() - flush_started  # an upload outlasting its round
        _add(totals["with"], windows, seconds, time.process_time() - cpu_started)
        saves += saved
        pair_ratios.append((windows / seconds) / without)
    rate = {arm: windows / seconds for arm, (windows, seconds, _) in totals.items()}
    per_cpu = {arm: windows / cpu for arm, (windows, _, cpu) in totals.items()}
    return {
        "windows_per_s_without": rate["without"],
        "windows_per_s_with": rate["with"],
        "throughput_ratio": rate["with"] / rate["without"],
        "cpu_throughput_ratio": per_cpu["with"] / per_cpu["without"],
        "pair_ratios": pair_ratios,
        "median_pair_ratio": statistics.median(pair_ratios),
        "checkpoints_saved": saves,
        "round_s": round_s,
        "rounds": rounds,
    }


def run_bench_checkpoint(
    uri: str,
    *,
    every_seconds: float = 30.0,
    round_seconds: float = 30.0,
    rounds: int = 10,
    repeats: int = 3,
    upload_only: bool = False,
    batch_size: int | None = None,
    json_output: bool = False,
) -> int:
    if rounds < 2 or rounds % 2:
        raise UserError(f"--rounds {rounds}: need an even number >= 2 (the arms alternate)")
    trainer = _Trainer(batch_size)
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        config = CheckpointConfig(Path(tmp) / "run" / CHECKPOINTS_DIR, every_seconds, None, uri)
        manager = CheckpointManager(config)
        try:
            result: dict[str, Any] = {"uri": uri, "device": trainer.choice.description}
            result |= measure_upload(trainer, manager, repeats)
            # Robust to neighbours on a shared machine: charge each checkpoint's whole
            # CPU cost (save + upload threads) against training, one per interval.
            cost_s = statistics.median(result["save_and_upload_cpu_s"])
            result["cpu_accounted_ratio"] = 1 - cost_s / every_seconds
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
        f"checkpoint of {result['state_mb']:.0f} MB to {result['uri']}: the loop waits "
        f"{statistics.median(result['loop_blocked_s']):.2f} s, save + upload {uploads} s "
        f"({verdict} the {CHECKPOINT_BUDGET_SECONDS:.0f} s budget); CPU per checkpoint "
        f"{statistics.median(result['save_and_upload_cpu_s']):.2f} s, so at most "
        f"{1 - result['cpu_accounted_ratio']:.1%} of the time"
    )
    if "throughput_ratio" in result:
        ratio = result["throughput_ratio"]
        verdict = "meets" if ratio >= REQUIRED_THROUGHPUT_RATIO else "BELOW"
        print(
            f"throughput: {result['windows_per_s_without']:,.0f} windows/s without, "
            f"{result['windows_per_s_with']:,.0f} with a checkpoint every "
            f"{result['checkpoint_every_s']:.0f} s: ratio {ratio:.3f} "
            f"({verdict} the {REQUIRED_THROUGHPUT_RATIO} target); per CPU-second "
            f"{result['cpu_throughput_ratio']:.3f}"
        )
