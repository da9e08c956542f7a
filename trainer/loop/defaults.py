"""The settings a run leaves to the trainer: global batch, learning rate, formulation.

Left out on the command line, each is chosen at the run's first start, recorded in
config.json and every checkpoint, and taken from the checkpoint by every resume: the
global batch fixes the epoch's batches and the step count, so a run resumed on a box
with fewer GPUs must keep it, not take that box's default.

- Global batch: `PER_RANK_BATCH` windows per rank times the ranks. The old default of
  256 over all ranks gave each of 8 GPUs 32 windows, and one GPU at 256 is bound by
  its ~410 kernel launches a step (3.5-5 ms whatever the batch): 1024 per GPU is what
  `fab plan` and `bench` assume. 256 on a CPU: measured best on 2 cores.
- Learning rate: `REFERENCE_LR` (tuned at a global batch of `REFERENCE_BATCH`) times
  the square root of global batch / 256, the scaling that keeps AdamW's updates
  comparable (Malladi et al. 2022, "On the SDEs and scaling rules for adaptive
  gradient algorithms"); the linear warmup (`OptimConfig.warmup_fraction`) ramps up
  to it. What was measured on CPU, and what was not on a GPU: docs/trainer.md.
- Formulation: `trainer.loop.formulation`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from trainer.config import RunConfig, UserError
from trainer.model import default_formulation

PER_RANK_BATCH = {"cpu": 256, "cuda": 1024}
REFERENCE_LR = 2e-3
REFERENCE_BATCH = 256
# Formulations a device must not train with. nhwc on the CPU: torch 2.13's float32
# channels-last kernels on one thread gave other input gradients than the same network
# in float64 (tests/trainer/test_model.py compares in float64).
UNFIT_FORMULATIONS = {"cpu": ("nhwc",)}


def default_lr(global_batch: int) -> float:
    """The peak learning rate for `global_batch` windows a step."""
    return REFERENCE_LR * math.sqrt(global_batch / REFERENCE_BATCH)


def settle(config: RunConfig, device: torch.device, saved: dict[str, Any] | None) -> RunConfig:
    """`config` with its global batch and learning rate set: the flag's, else the run's
    (`saved`: its checkpoint's config), else the default for `device`. A formulation
    left to the trainer becomes the run's when it fits the device, else stays auto; a
    name left out is the run's."""
    tc, oc = config.train, config.optim
    saved_train = (saved or {}).get("train", {})
    batch = tc.batch_size or saved_train.get("batch_size")
    batch = batch or PER_RANK_BATCH[device.type] * tc.world_size
    lr = oc.lr or (saved or {}).get("optim", {}).get("lr") or default_lr(batch)
    formulation, saved_formulation = tc.formulation, saved_train.get("formulation", "auto")
    fits = saved_formulation not in UNFIT_FORMULATIONS.get(device.type, ())
    if formulation == "auto" and fits:
        formulation = saved_formulation
    name = tc.name or saved_train.get("name", "")
    train = dataclasses.replace(tc, batch_size=batch, formulation=formulation, name=name)
    return dataclasses.replace(config, train=train, optim=dataclasses.replace(oc, lr=lr))


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
