"""The settings a run leaves to the trainer: global batch, learning rate, warm-up.

Left out on the command line, each is chosen at the run's first start, recorded in
config.json and every checkpoint, and taken from the checkpoint by every resume: the
global batch fixes the epoch's batches and the step count, so a run resumed on a box
with fewer GPUs must keep it, not take that box's default.

- Global batch: `global_batch`, the same whatever the GPU count; each rank takes its
  share (`per_rank_batch`: the global batch over the ranks, rounded up: shares may
  differ by one window). On a GPU it grows with the training set, a power of two from
  `GLOBAL_BATCH_RANGE` that leaves at least `MIN_STEPS_PER_EPOCH` steps an epoch: a
  GPU step costs a fixed time (the launch of one CUDA graph, the optimizer over 7.2 M
  parameters) plus a time per window, so a larger batch buys windows/s, but only as
  many steps an epoch as a model needs to learn from the data before it overfits
  (measured, below), and the steps an epoch are the global batch's, not a GPU's. So
  more GPUs take smaller shares (128 a GPU on 8 GPUs at M1/M2), even where a GPU's
  step is then mostly its fixed cost (`fab plan` says what that buys). 256 on a CPU,
  over all its ranks: measured best on 2 cores. `fab plan` (`ops/plan`) plans the same
  batch; this module loads without torch for it. Why the rule is about the global
  batch: the gradient noise scale (`bench --noise-scale`, docs/trainer.md).
- Learning rate: `REFERENCE_LR` (tuned at a global batch of `REFERENCE_BATCH`) times
  the square root of global batch / 256, the scaling that keeps AdamW's updates
  comparable (Malladi et al. 2022, "On the SDEs and scaling rules for adaptive
  gradient algorithms"), up to `LR_SCALED_UP_TO_BATCH`: AdamW moves each weight by
  about the learning rate a step whatever the gradient, and a larger batch at a
  larger rate learned worse (below). The linear warmup (`OptimConfig.warmup_fraction`,
  at least one epoch: `trainer.loop.run.lr_lambda`) ramps up to it.

  Measured 2026-11-27 on one H200 (`bench --time-to-quality`'s M2-sized synthetic
  data, 1.68 M training windows, 20 epochs, seed 0): batch 1024 at 4e-3 (1640 steps
  an epoch) reached a best validation MAE of 5.38 mg/dL (epoch 3, 33 s of training);
  4096 at 4e-3 / 8e-3 (410 steps) 6.04 / 6.80, 8192 at 8e-3 (205 steps, the rule
  before, 8 GPUs' default) 6.01: no larger batch came within 3% of 1024's best at any
  epoch, though its steps ran twice as fast; all of them overfit after a few epochs
  (docs/trainer.md).
- AdamW's beta2: 0.999 at the reference batch, 1 - beta2 scaled with the batch (the
  same SDE rule), down to `MIN_BETA2`: 0.996 at 1024, the runs above took it.
- Weight decay: on convolution and linear weights only (`parameter_groups`).
- GPU memory: the default global batch is capped where a rank's share would not fit
  beside the resident data (`memory_batch_cap`): a 16 GB V100 or T4 takes a smaller
  batch than an 80 GB H100, said in one line. A batch given on the command line, or a
  resumed run's, is the run's: where a rank's share of it would not fit, each step
  splits the share into parts that do and accumulates their gradients (`step_parts`).
- Formulation: `trainer.loop.formulation`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from trainer.config import DataConfig, RunConfig

if TYPE_CHECKING:
    import torch

MIN_STEPS_PER_EPOCH = 1600
# The default global batch on GPUs, over all of them; also the range of a rank's share
# that the memory cap chooses from.
GLOBAL_BATCH_RANGE = (1024, 16384)
CPU_BATCH = 256  # global, over all CPU ranks
REFERENCE_LR = 2e-3
REFERENCE_BATCH = 256
LR_SCALED_UP_TO_BATCH = 1024  # the learning rate stops growing here: 4e-3
REFERENCE_BETA2 = 0.999  # torch's default, what runs before 2026-11-27 took at any batch
MIN_BETA2 = 0.95
# Formulations a device must not train with. nhwc on the CPU: torch 2.13's float32
# channels-last kernels on one thread gave other input gradients than the same network
# in float64 (tests/trainer/test_model.py compares in float64).
UNFIT_FORMULATIONS = {"cpu": ("nhwc",)}
# GPU memory one window of the per-rank batch takes in a training step (the activations
# kept for the backward pass), from the peak memory of the captured step on an H100 at
# batch 1024 and 4096 in bf16: 0.29 MB a window for nhwc and torch, 0.62 MB for gemm;
# fp32 activations are twice bf16's.
TRAIN_BYTES_PER_WINDOW = {"bf16": 0.65e6, "fp16": 0.65e6, "fp32": 1.3e6}
# A step's activations twice: the graph's pool, and an epoch's short last batch, which
# runs eagerly beside it.
STEP_MEMORY_COPIES = 2
# Of the free memory, what the steps and the data may take: the rest is the evaluation
# graph's share, cuDNN's workspaces and the allocator's fragmentation.
USABLE_MEMORY_FRACTION = 0.85
GIB = 2**30


def global_batch(
    device_type: str, train_windows: int, world_size: int = 1, cap: int | None = None
) -> int:
    """The default windows a step over all `world_size` ranks: on a GPU the largest
    power of two that leaves `MIN_STEPS_PER_EPOCH` steps an epoch, within
    `GLOBAL_BATCH_RANGE`, whatever the ranks, and at most `cap` windows a rank
    (`memory_batch_cap`); `CPU_BATCH` on a CPU."""
    if device_type != "cuda":
        return CPU_BATCH
    low, high = GLOBAL_BATCH_RANGE
    wanted = max(train_windows / MIN_STEPS_PER_EPOCH, 1.0)
    batch = min(max(2 ** math.floor(math.log2(wanted)), low), high)
    return min(batch, cap * world_size) if cap else batch


def per_rank_batch(
    device_type: str, train_windows: int, world_size: int = 1, cap: int | None = None
) -> int:
    """A rank's share of the default global batch (`global_batch`): the largest, where
    the shares differ by one window."""
    return -(-global_batch(device_type, train_windows, world_size, cap) // world_size)


def step_parts(per_rank: int, cap: int | None) -> int:
    """How many parts a step splits a rank's `per_rank` windows into so that each fits
    in `cap` (None: the CPU, no cap): 1 where the share fits."""
    return 1 if cap is None or per_rank <= cap else -(-per_rank // cap)


class BatchCap(NamedTuple):
    """The largest per-rank batch a GPU's memory holds, and what it was judged on."""

    per_rank: int
    free_bytes: float
    resident_bytes: float

    def said(self, batch: int, wanted: int) -> str:
        """The line that says a run takes `batch` a GPU where its data calls for `wanted`."""
        return (
            f"batch: {batch} windows a GPU, not the {wanted} this data calls for: its steps "
            f"would not fit in the GPU's {self.free_bytes / GIB:.1f} GiB free beside "
            f"{self.resident_bytes / GIB:.1f} GiB of data (--batch-size overrides)"
        )

    def split(self, per_rank: int, batch: int, parts: int) -> str:
        """The line that says each step computes a rank's `per_rank` windows of the run's
        global `batch` in `parts` parts."""
        return (
            f"batch: the run's global batch of {batch} is {per_rank} windows a GPU here, more "
            f"than its {self.free_bytes / GIB:.1f} GiB free hold at once beside "
            f"{self.resident_bytes / GIB:.1f} GiB of data (at most {self.per_rank}): each step "
            f"computes them in {parts} parts and adds their gradients (BatchNorm's statistics "
            "come from each part)"
        )


def memory_batch_cap(free_bytes: float, resident_bytes: float, precision: str) -> BatchCap:
    """The largest per-rank batch, a power of two from `GLOBAL_BATCH_RANGE` (its
    smallest at least), whose steps fit in `free_bytes` of GPU memory beside
    `resident_bytes` of data at `precision`."""
    low, high = GLOBAL_BATCH_RANGE
    usable = USABLE_MEMORY_FRACTION * free_bytes - resident_bytes
    per_window = STEP_MEMORY_COPIES * TRAIN_BYTES_PER_WINDOW[precision]
    batch = high
    while batch > low and batch * per_window > usable:
        batch //= 2
    return BatchCap(batch, free_bytes, resident_bytes)


def train_windows_of(windows: int) -> int:
    """About how many of a dataset's `windows` the default split trains on (the split
    is by case: a plan's estimate, not the run's count)."""
    defaults = DataConfig("")
    return round(windows * (1 - defaults.val_fraction - defaults.test_fraction))


def default_lr(global_batch: int) -> float:
    """The peak learning rate for `global_batch` windows a step."""
    return REFERENCE_LR * math.sqrt(min(global_batch, LR_SCALED_UP_TO_BATCH) / REFERENCE_BATCH)


def default_beta2(global_batch: int) -> float:
    """AdamW's beta2 for `global_batch` windows a step."""
    scaled = 1 - (1 - REFERENCE_BETA2) * global_batch / REFERENCE_BATCH
    return round(max(MIN_BETA2, min(REFERENCE_BETA2, scaled)), 6)


def parameter_groups(model: torch.nn.Module, weight_decay: float, decay_all: bool) -> list[dict]:
    """AdamW's parameter groups: weight decay on the convolution and linear weights; none
    on BatchNorm's scales and shifts and the biases (one-dimensional), which no scale
    invariance protects and which decay only pulls off their values (`decay_all`: every
    parameter decays, as runs before 2026-11-27 did)."""
    parameters = list(model.parameters())
    if decay_all:
        return [{"params": parameters, "weight_decay": weight_decay}]
    return [
        {"params": [p for p in parameters if p.ndim > 1], "weight_decay": weight_decay},
        {"params": [p for p in parameters if p.ndim <= 1], "weight_decay": 0.0},
    ]


def settle(
    config: RunConfig,
    device: torch.device,
    saved: dict[str, Any] | None,
    train_windows: int,
    batch_cap: int | None = None,
) -> RunConfig:
    """`config` with its global batch and learning rate set: the flag's, else the run's
    (`saved`: its checkpoint's config), else the default for `device` and the run's
    `train_windows` (`global_batch`: the same at any world size), at most `batch_cap`
    windows a rank. A formulation left to the trainer
    becomes the run's when it fits the device, else stays auto; a name left out is the
    run's."""
    tc, oc = config.train, config.optim
    saved_train = (saved or {}).get("train", {})
    batch = tc.batch_size or saved_train.get("batch_size")
    batch = batch or global_batch(device.type, train_windows, tc.world_size, batch_cap)
    saved_optim = (saved or {}).get("optim", {})
    lr = oc.lr or saved_optim.get("lr") or default_lr(batch)
    # A run started before these settings existed trained with their old values.
    old_run = saved is not None
    beta2 = oc.beta2 or saved_optim.get("beta2") or (REFERENCE_BETA2 if old_run else None)
    decay_all = oc.decay_norms_and_biases
    if decay_all is None:
        decay_all = saved_optim.get("decay_norms_and_biases", old_run)
    formulation, saved_formulation = tc.formulation, saved_train.get("formulation", "auto")
    fits = saved_formulation not in UNFIT_FORMULATIONS.get(device.type, ())
    if formulation == "auto" and fits:
        formulation = saved_formulation
    name = tc.name or saved_train.get("name", "")
    train = dataclasses.replace(tc, batch_size=batch, formulation=formulation, name=name)
    optim = dataclasses.replace(
        oc, lr=lr, beta2=beta2 or default_beta2(batch), decay_norms_and_biases=decay_all
    )
    return dataclasses.replace(config, train=train, optim=optim)
