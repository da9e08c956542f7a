"""Which formulation of the network (`trainer.model`) trains fastest on this device.

cuDNN's Conv1d over (batch, channels, length), one GEMM per convolution, and
Conv2d(1 x k) in channels-last memory run at speeds that depend on the GPU, the
batch, the precision and the cuDNN version, and none of them was measured on a GPU
when this was written. So `--formulation auto` on a GPU times a few steps of each at
the run's per-rank batch and precision at its first start (seconds) and keeps the
fastest; the run records it and its resumes keep it (`trainer.loop.defaults`).
`python -m trainer bench` reports the same comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig
from trainer.loop.device import DeviceChoice
from trainer.model import build_model, default_formulation

WARMUP_STEPS = 3  # cuDNN's autotuning and the allocator settle in the first steps
TIMED_STEPS = 10
# Another formulation replaces the device's default only when it is this much faster: a
# near-tie would flip from one run to the next, and with it every kernel of the run.
MARGIN = 0.05
GRAD_CLIP_NORM = 1.0  # OptimConfig's default: the timed step clips as the loop does


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, choice: DeviceChoice
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One optimizer step as the loop takes it (autocast forward, smooth-L1 as a mean,
    backward, clip, AdamW), without a host sync; returns the loss."""

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with choice.autocast():
            loss = F.smooth_l1_loss(model(x).float(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def step_seconds(
    model_config: ModelConfig,
    formulation: str,
    choice: DeviceChoice,
    batch: int,
    window_length: int,
) -> float:
    """Seconds per training step of `formulation` at `batch` random windows."""
    model = build_model(model_config, choice.device, formulation).train()
    step = training_step(model, choice.optimizer(model.parameters(), 1e-3, 1e-2), choice)
    x = torch.randn(batch, 1, window_length, device=choice.device)
    y = torch.randn(batch, device=choice.device)
    for _ in range(WARMUP_STEPS):
        step(x, y)
    choice.synchronize()
    started = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step(x, y)
    choice.synchronize()
    return (time.perf_counter() - started) / TIMED_STEPS


def fastest_formulation(
    model_config: ModelConfig,
    choice: DeviceChoice,
    batch: int,
    window_length: int,
    formulations: Sequence[str],
) -> tuple[str, dict[str, float]]:
    """The formulation whose training step is fastest here (the device's default unless
    another beats it by `MARGIN`), and each one's seconds. The peak-memory count
    starts again after it: the run's GPU memory figure is its own."""
    seconds = {
        name: step_seconds(model_config, name, choice, batch, window_length)
        for name in formulations
    }
    if choice.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(choice.device)
    return pick(seconds, choice.device), seconds


def pick(seconds: dict[str, float], device: torch.device) -> str:
    """The fastest of `seconds` (per step, at one batch), or the device's default
    formulation unless that is beaten by `MARGIN`."""
    fastest = min(seconds, key=seconds.__getitem__)
    default = default_formulation(device)
    if default in seconds and seconds[fastest] > (1 - MARGIN) * seconds[default]:
        return default
    return fastest
