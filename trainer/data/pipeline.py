"""The on-device batch pipeline: normalisation from the train split, one tensor per
split, one permutation per epoch.

No per-sample Dataset/DataLoader: a split's windows are one normalised tensor (on the
GPU when it fits, else pinned host memory), an epoch is one permutation that is a pure
function of (seed, epoch), and a batch is a slice of it used as an index. That makes
the position inside an epoch a single integer, which is what exact resume needs.

The permutation is drawn on the CPU whatever the device: torch's CUDA `randperm`
orders differently from the CPU's, so a run resumed on another device type (or with
the split moved between GPU and host memory) would otherwise replay another order.
The split's tensor is filled a chunk at a time from the memory-mapped file, so the
host holds it once, not the three float32 copies (~10 GB for M3) that converting and
normalising it whole would make.

Under torchrun every rank holds the whole split and draws the same permutation; rank r
takes the r-th of `world_size` disjoint parts of each (global) batch. No
DistributedSampler: the steps per epoch and the order are those of one process.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from trainer.config import UserError
from trainer.data.dataset import SCAN_CHUNK_ROWS, Dataset

GPU_RESIDENT_MAX_FRACTION = 0.4  # of free GPU memory a split may take before it stays on host
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class Normalisation:
    """Input and label statistics of the train split (never of val/test)."""

    input_mean: float
    input_std: float
    label_mean: float
    label_std: float
    label_median: float  # the constant baseline every report shows

    @classmethod
    def from_train(cls, dataset: Dataset, train_cases: list[int]) -> Normalisation:
        rows = np.flatnonzero(np.isin(dataset.case_id, train_cases))
        total, total_sq, count = 0.0, 0.0, 0
        for start in range(0, rows.size, SCAN_CHUNK_ROWS):
            chunk = np.asarray(dataset.windows[rows[start : start + SCAN_CHUNK_ROWS]], np.float64)
            total, total_sq, count = (
                total + chunk.sum(),
                total_sq + (chunk**2).sum(),
                count + chunk.size,
            )
        mean = total / count
        labels = np.asarray(dataset.glucose[rows], np.float64)
        return cls(
            input_mean=float(mean),
            input_std=float(max(math.sqrt(max(total_sq / count - mean**2, 0.0)), 1e-8)),
            label_mean=float(labels.mean()),
            label_std=float(max(labels.std(), 1e-8)),
            label_median=float(np.median(labels)),
        )


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order of an epoch: a pure function of (seed, epoch), the same on every device
    (drawn on the CPU; ~0.1 s per epoch for M3's 12 M windows)."""
    generator = torch.Generator()
    generator.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def _drawn_ahead(n: int, seed: int, epoch: int, pinned: bool) -> torch.Tensor:
    order = epoch_permutation(n, seed, epoch)
    return order.pin_memory() if pinned else order


# One thread draws the next epoch's order while this one's steps run: on a GPU the
# loop would otherwise stop for the draw and its copy (~0.1 s an epoch at M3's size,
# 1% of an epoch at 800 k windows/s). The draw is the same pure function.
_ORDER_DRAWER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epoch-order")


def micro_batch_seed(seed: int, epoch: int, micro_batch: int, rank: int) -> int:
    """The seed of a micro-batch's dropout on one rank: a pure function of where it is,
    so resuming needs no RNG state from any rank and no two ranks share masks."""
    mixed = ((seed * 1_000_003 + epoch) * 1_000_003 + micro_batch) * 10_007 + rank
    return mixed % (1 << 63)  # torch.manual_seed's range


class WindowPipeline:
    """One split's windows as one normalised (N, 1, L) tensor; a batch is an index into it."""

    def __init__(
        self,
        dataset: Dataset,
        cases: list[int],
        norm: Normalisation,
        device: torch.device,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        rows = np.flatnonzero(np.isin(dataset.case_id, cases))
        if rows.size == 0:
            raise UserError(f"{dataset.directory}: no windows for cases {cases[:5]}...")
        labels = torch.from_numpy(np.asarray(dataset.glucose[rows], dtype=np.float32))
        self.glucose_mg_dl = labels.clone()
        labels = (labels - norm.label_mean) / norm.label_std
        self.device = device
        self.batch_size = batch_size  # global: over all ranks
        self.rank, self.world_size = rank, world_size
        split_bytes = rows.size * dataset.windows.shape[1] * FLOAT32_BYTES
        self.on_device = device.type == "cpu" or _fits_on_gpu(split_bytes, device)
        home = device if self.on_device else torch.device("cpu")
        self.windows = _normalised_windows(dataset.windows, rows, norm, home, self.on_device)
        self.labels = labels.to(device) if self.on_device else labels.pin_memory()
        self._next_order: tuple[tuple[int, int], Future[torch.Tensor]] | None = None

    def __len__(self) -> int:
        return self.windows.shape[0]

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self) / self.batch_size)

    def permutation(self, seed: int, epoch: int) -> torch.Tensor:
        """Epoch `epoch`'s order, where the batches are indexed (beside the windows); the
        next epoch's is drawn meanwhile (`_ORDER_DRAWER`)."""
        drawn, self._next_order = self._next_order, None
        ahead = self.on_device and self.device.type == "cuda"
        if drawn is not None and drawn[0] == (seed, epoch):
            order = drawn[1].result()
        else:
            order = _drawn_ahead(len(self), seed, epoch, ahead)
        if ahead:
            future = _ORDER_DRAWER.submit(_drawn_ahead, len(self), seed, epoch + 1, True)
            self._next_order = ((seed, epoch + 1), future)
            return order.to(self.device, non_blocking=True)
        return order

    def windows_in_batch(self, step: int) -> int:
        """Windows of micro-batch `step` over all ranks (the last one may be short)."""
        return min(self.batch_size, len(self) - step * self.batch_size)

    def batch(self, order: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's part of micro-batch `step` of an epoch whose order is `order`.

        Parts are equal (batch_size / world_size) except in a short last batch, where
        they differ by one window and trailing ranks may get none.
        """
        index = order[step * self.batch_size : (step + 1) * self.batch_size]
        if self.world_size > 1:
            index = index.tensor_split(self.world_size)[self.rank]
        # index_select, not windows[index]: advanced indexing is ~20x slower on CPU.
        x, y = self.windows.index_select(0, index), self.labels.index_select(0, index)
        if not self.on_device:
            # Both from pinned memory and non-blocking: a pageable copy would stall the
            # host on every step, the per-step sync the pipeline exists to avoid.
            x = x.pin_memory().to(self.device, non_blocking=True)
            y = y.pin_memory().to(self.device, non_blocking=True)
        return x, y

    def in_order(
        self, batch_size: int, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Windows start..stop (default: all) once, in stored order (evaluation)."""
        stop = len(self) if stop is None else stop
        for first in range(start, stop, batch_size):
            last = min(first + batch_size, stop)
            x = self.windows[first:last].to(self.device, non_blocking=True)
            yield x, self.labels[first:last].to(self.device, non_blocking=True)


def _fits_on_gpu(split_bytes: int, device: torch.device) -> bool:
    free_bytes, _ = torch.cuda.mem_get_info(device)
    return split_bytes < GPU_RESIDENT_MAX_FRACTION * free_bytes


def _normalised_windows(
    windows: np.ndarray, rows: np.ndarray, norm: Normalisation, device: torch.device, resident: bool
) -> torch.Tensor:
    """`windows[rows]`, normalised, as one float32 (N, 1, L) tensor on `device` (pinned
    host memory when not `resident`), filled `SCAN_CHUNK_ROWS` rows at a time."""
    shape = (rows.size, 1, windows.shape[1])
    out = torch.empty(shape, device=device, pin_memory=not resident)
    for start in range(0, rows.size, SCAN_CHUNK_ROWS):
        part = rows[start : start + SCAN_CHUNK_ROWS]
        # One chunk alive at a time: it is freed before the next one is read.
        out[start : start + part.size, 0].copy_(_normalised_chunk(windows, part, norm))
    return out


def _normalised_chunk(windows: np.ndarray, part: np.ndarray, norm: Normalisation) -> torch.Tensor:
    chunk = torch.from_numpy(np.asarray(windows[part], dtype=np.float32))
    return chunk.sub_(norm.input_mean).div_(norm.input_std)


def norm_to_state(norm: Normalisation) -> tuple[dict[str, float], dict[str, float]]:
    """(label_norm, input_norm) as the plain dicts a checkpoint stores."""
    label = {"mean": norm.label_mean, "std": norm.label_std, "median": norm.label_median}
    return label, {"mean": norm.input_mean, "std": norm.input_std}


def norm_from_state(label_norm: dict[str, float], input_norm: dict[str, float]) -> Normalisation:
    return Normalisation(
        input_mean=float(input_norm["mean"]),
        input_std=float(input_norm["std"]),
        label_mean=float(label_norm["mean"]),
        label_std=float(label_norm["std"]),
        label_median=float(label_norm["median"]),
    )
