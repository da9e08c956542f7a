"""The batch `train` takes for a plan's data on a size: the global batch, the same at
any GPU count (`trainer.loop.defaults.global_batch`, imported: the trainer's own rule),
a GPU's share of it, and whether a GPU's memory made it depart from the rule.

Plain arithmetic: `fab plan` must start without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ops.plan.workload import training_precision
from stack.catalog import GpuSpec
from trainer.loop.defaults import (
    GIB,
    global_batch,
    memory_batch_cap,
    per_rank_batch,
    train_windows_of,
)

# A dataset's windows as the trainer holds them: float32.
DATASET_BYTES_PER_SAMPLE = 4
# The global batch the evidence measured best (M2-sized synthetic data, one H200,
# 2026-11-27: `trainer.loop.defaults`): a larger one is the rule's extrapolation.
MEASURED_BEST_GLOBAL_BATCH = 1024


def planned_batch(windows: int, gpus: int, cap: int | None = None) -> int:
    """The per-GPU batch `train` takes for a dataset of `windows` over `gpus` ranks, at
    most `cap` (`memory_cap`): a share of `planned_global_batch` (the largest, where
    shares differ by one), the trainer's own rule, `trainer.loop.defaults`."""
    return per_rank_batch("cuda", train_windows_of(windows), gpus, cap)


def planned_global_batch(windows: int, gpus: int, cap: int | None = None) -> int:
    """The global batch `train` takes for a dataset of `windows` over `gpus` ranks, at
    most `cap` windows a GPU: the same at any GPU count unless the memory binds."""
    return global_batch("cuda", train_windows_of(windows), gpus, cap)


def memory_cap(gpu: GpuSpec, windows: int, window_length: int) -> int:
    """The largest per-GPU batch whose steps fit in `gpu`'s memory beside a dataset of
    `windows`, by the trainer's rule (`trainer.loop.defaults.memory_batch_cap`): the
    card's memory all free, the whole float32 dataset resident on it. The trainer reads
    what is free at its start (the CUDA context takes a few hundred MB of it) and keeps
    a split on the host past 40% of that (`trainer.data.pipeline`, which needs torch);
    for datasets that large the plan's batch is the smaller."""
    data_bytes = windows * window_length * DATASET_BYTES_PER_SAMPLE
    free_bytes = gpu.memory_gib * GIB
    return memory_batch_cap(free_bytes, data_bytes, training_precision(gpu)).per_rank


@dataclass(frozen=True)
class Batches:
    """The batches `train` takes for a plan's data on `gpus` of a size."""

    per_gpu: int
    global_: int
    rule: int  # the rule's global batch for the data, whatever the memory
    cap: int  # the most windows a step a GPU's memory holds beside the data

    @property
    def departs(self) -> str:
        """Why the global batch is not the rule's ("" where it is)."""
        if self.global_ == self.rule:
            return ""
        return f"{self.global_}, not {self.rule} ({self.cap} a GPU)"


def batches(gpu: GpuSpec, gpus: int, windows: int, window_length: int) -> Batches:
    """The batches of one run over `gpus` GPUs of model `gpu` on `windows` windows."""
    cap = memory_cap(gpu, windows, window_length)
    return Batches(
        planned_batch(windows, gpus, cap),
        planned_global_batch(windows, gpus, cap),
        planned_global_batch(windows, 1),
        cap,
    )
