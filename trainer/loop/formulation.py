"""Which formulation of the network (`trainer.model`) trains fastest on this device.

cuDNN's Conv1d over (batch, channels, length), one GEMM per convolution, and
Conv2d(1 x k) in channels-last memory run at speeds that depend on the GPU, the
batch, the precision and the cuDNN version, and none of them was measured on a GPU
when this was written. So `--formulation auto` on a GPU times a few steps of each at
the run's per-rank batch and precision at its first start (seconds), as the run will
take them (replayed as one CUDA graph, `trainer.loop.step`: eager and launch-bound,
nhwc was 4.7% faster on an H100 where its GPU time was half), and keeps the fastest;
the run records it and its resumes keep it (`trainer.loop.defaults`).
`python -m trainer bench` reports the same comparison.

gemm is not timed on a GPU (`GPU_TIMED_FORMULATIONS`): captured on an H100 it ran at
half nhwc's speed (261 k against 493 k windows/s at batch 4096), and its unfolded
inputs take about twice the memory (~13 GB at batch 16384, more than a 16 GB V100 or
T4 has beside the data). `--formulation gemm` still runs it. A formulation that runs
out of GPU memory while it is timed is left out, said in one line.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Sequence

import torch

from trainer.config import ModelConfig, RunConfig, UserError
from trainer.loop.defaults import UNFIT_FORMULATIONS
from trainer.loop.device import DeviceChoice
from trainer.loop.step import WARMUP_STEPS as CAPTURE_WARMUP_STEPS
from trainer.loop.step import TrainStep
from trainer.model import FORMULATIONS, build_model, default_formulation

# cuDNN's autotuning and the allocator settle in the first steps, then the capture
WARMUP_STEPS = CAPTURE_WARMUP_STEPS + 2
TIMED_STEPS = 10
# Another formulation replaces the device's default only when it is this much faster: a
# near-tie would flip from one run to the next, and with it every kernel of the run.
MARGIN = 0.05
GRAD_CLIP_NORM = 1.0  # OptimConfig's default: the timed step clips as the loop does
GPU_TIMED_FORMULATIONS = ("torch", "nhwc")


def timed_formulations(device: torch.device) -> tuple[str, ...]:
    """The formulations `--formulation auto` times on `device` (all on a CPU, where the
    default is taken untimed, and for `bench`'s report)."""
    return GPU_TIMED_FORMULATIONS if device.type == "cuda" else FORMULATIONS


def timed_step(
    model_config: ModelConfig, formulation: str, choice: DeviceChoice, graph: bool = True
) -> TrainStep:
    """The step `train` runs for `formulation` (captured on a GPU unless `graph` is off),
    on a fresh network: what the formulation timing and `bench` measure."""
    model = build_model(model_config, choice.device, formulation).train()
    optimizer = choice.optimizer(model.parameters(), 1e-3, 1e-2)
    scaler = torch.amp.GradScaler(choice.device.type) if choice.needs_grad_scaler else None
    capture = graph and choice.device.type == "cuda"
    return TrainStep(
        model, list(model.parameters()), optimizer, scaler, choice, GRAD_CLIP_NORM, capture
    )


def step_seconds(
    model_config: ModelConfig,
    formulation: str,
    choice: DeviceChoice,
    batch: int,
    window_length: int,
    graph: bool = True,
) -> float:
    """Seconds per training step of `formulation` at `batch` random windows, as `train`
    takes it: captured and replayed on a GPU unless `graph` is off (the capture is in
    the warm-up)."""
    step = timed_step(model_config, formulation, choice, graph)
    x = torch.randn(batch, 1, window_length, device=choice.device)
    y = torch.randn(batch, device=choice.device)
    for _ in range(WARMUP_STEPS):
        step(x, y, 1 / batch)
    choice.synchronize()
    started = time.perf_counter()
    for _ in range(TIMED_STEPS):
        step(x, y, 1 / batch)
    choice.synchronize()
    return (time.perf_counter() - started) / TIMED_STEPS


def fastest_formulation(
    model_config: ModelConfig,
    choice: DeviceChoice,
    batch: int,
    window_length: int,
    formulations: Sequence[str],
    graph: bool = True,
) -> tuple[str, dict[str, float]]:
    """The formulation whose training step is fastest here (the device's default unless
    another beats it by `MARGIN`), and each one's seconds (None: it ran out of GPU
    memory). The peak-memory count starts again after it: the run's GPU memory figure
    is its own."""
    seconds: dict[str, float | None] = {}
    for name in formulations:
        try:
            seconds[name] = step_seconds(model_config, name, choice, batch, window_length, graph)
        except torch.OutOfMemoryError:
            seconds[name] = None
        _release_gpu_memory(choice)
    if choice.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(choice.device)
    fitting = {name: s for name, s in seconds.items() if s is not None}
    if not fitting:
        raise UserError(
            f"--formulation auto: every formulation ({', '.join(seconds)}) ran out of GPU "
            f"memory at {batch} windows a GPU; pass a smaller --batch-size"
        )
    return pick(fitting, choice.device), seconds


def _release_gpu_memory(choice: DeviceChoice) -> None:
    """What a timed step held (its graph's pool too) back to the GPU for the next one."""
    if choice.device.type == "cuda":
        gc.collect()  # a step that raised may sit in a reference cycle with its frame
        torch.cuda.empty_cache()


def pick(seconds: dict[str, float], device: torch.device) -> str:
    """The fastest of `seconds` (per step, at one batch), or the device's default
    formulation unless that is beaten by `MARGIN`."""
    fastest = min(seconds, key=seconds.__getitem__)
    default = default_formulation(device)
    if default in seconds and seconds[fastest] > (1 - MARGIN) * seconds[default]:
        return default
    return fastest


def resolve_formulation(
    config: RunConfig, device: torch.device, fastest: Callable[[], str]
) -> RunConfig:
    """`config` with `--formulation auto` resolved: gemm on a CPU; on a GPU `fastest()`
    (a timing), unless torch's deterministic mode is on: a timing would let two runs
    pick different kernels, which --deterministic promises they do not."""
    formulation = config.train.formulation
    if formulation in UNFIT_FORMULATIONS.get(device.type, ()):
        raise UserError(
            f"--formulation {formulation} is not for the {device.type.upper()}: torch's "
            "channels-last CPU kernels computed other gradients; use gemm, torch or auto"
        )
    if formulation == "auto":
        measure = device.type == "cuda" and not torch.are_deterministic_algorithms_enabled()
        formulation = fastest() if measure else default_formulation(device)
    train = dataclasses.replace(config.train, formulation=formulation)
    return dataclasses.replace(config, train=train)
