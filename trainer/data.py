"""Dataset loading and validation, case-level splits, and the on-device batch pipeline.

No per-sample Dataset/DataLoader: a split's windows are one normalised tensor (on the
GPU when it fits, else pinned host memory), an epoch is one permutation that is a pure
function of (seed, epoch), and a batch is a slice of it used as an index. That makes
the position inside an epoch a single integer, which is what exact resume needs.

Under DDP every rank holds the whole split and draws the same permutation; rank r
takes the r-th of `world_size` disjoint parts of each (global) batch. No
DistributedSampler: the steps per epoch and the order are those of one process.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.config import UserError

GLUCOSE_RANGE_MG_DL = (10.0, 1000.0)
MIN_CASES = 3
MIN_WINDOW_LENGTH = 32
FINGERPRINT_SAMPLE_ROWS = 256
SCAN_CHUNK_ROWS = 65_536  # bounds memory while scanning a memory-mapped windows.npy
GPU_RESIDENT_MAX_FRACTION = 0.4  # of free GPU memory a split may take before it stays on host
DATASET_FILES = ("windows.npy", "glucose.npy", "case_id.npy", "meta.json")
# Training reads windows as float32: a float64 value past this becomes inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Dataset:
    directory: Path
    windows: np.ndarray  # [N, L], memory-mapped
    glucose: np.ndarray  # [N] mg/dL
    case_id: np.ndarray  # [N]
    meta: dict
    fingerprint: str

    @property
    def cases(self) -> np.ndarray:
        return np.unique(self.case_id)


def _fail(path: Path, problem: str, fix: str) -> UserError:
    return UserError(f"{path}: {problem}; {fix}")


def _load_array(path: Path) -> np.ndarray:
    if not path.is_file():
        raise _fail(path, "file is missing", "a dataset dir needs " + ", ".join(DATASET_FILES))
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as error:
        raise _fail(
            path, f"not a readable .npy array ({error})", "rewrite it with numpy.save"
        ) from None


def _count_bad_rows(windows: np.ndarray) -> int:
    """Rows with NaN or inf, or (float64) values that turn into inf as float32."""
    wide = windows.dtype.kind == "f" and windows.dtype.itemsize > 4
    bad = 0
    for start in range(0, windows.shape[0], SCAN_CHUNK_ROWS):
        chunk = np.asarray(windows[start : start + SCAN_CHUNK_ROWS])
        rows = ~np.isfinite(chunk)
        if wide:
            rows |= np.abs(chunk) > FLOAT32_MAX
        bad += int(rows.any(axis=1).sum())
    return bad


def _validate(directory: Path, windows: np.ndarray, glucose: np.ndarray, case_id: np.ndarray):
    w_path, g_path, c_path = (directory / name for name in DATASET_FILES[:3])
    if windows.ndim != 2 or windows.shape[1] < MIN_WINDOW_LENGTH:
        raise _fail(
            w_path, f"shape {windows.shape}", f"expected [N, L] with L >= {MIN_WINDOW_LENGTH}"
        )
    for path, array in ((g_path, glucose), (c_path, case_id)):
        if array.ndim != 1 or array.shape[0] != windows.shape[0]:
            raise _fail(
                path,
                f"shape {array.shape} ({array.shape[0] if array.ndim else 0} rows)",
                f"expected [{windows.shape[0]}], one row per window in windows.npy",
            )
    for path, array in ((w_path, windows), (g_path, glucose)):
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise _fail(path, f"dtype {array.dtype} is not numeric", "store float32 values")
    if not np.issubdtype(case_id.dtype, np.integer):
        raise _fail(c_path, f"dtype {case_id.dtype}", "expected integer case ids (int32)")
    if bad := _count_bad_rows(windows):
        raise _fail(
            w_path,
            f"NaN, inf or values beyond float32's range (±{FLOAT32_MAX:.1e}) in {bad} rows",
            "drop, repair or rescale those windows",
        )
    if bad := int((~np.isfinite(glucose)).sum()):
        raise _fail(g_path, f"NaN or inf in {bad} rows", "drop those windows")
    low, high = GLUCOSE_RANGE_MG_DL
    if bad := int(((glucose < low) | (glucose > high)).sum()):
        raise _fail(
            g_path,
            f"{bad} rows outside {low:g}-{high:g} mg/dL",
            "check the unit (mmol/L x 18 = mg/dL) or drop them",
        )
    if (found := np.unique(case_id).size) < MIN_CASES:
        raise _fail(c_path, f"only {found} distinct cases", f"need at least {MIN_CASES} to split")


def _fingerprint(windows: np.ndarray, glucose: np.ndarray, case_id: np.ndarray) -> str:
    """Cheap identity of the data: labels and case ids in full, a fixed sample of windows."""
    digest = hashlib.sha256()
    digest.update(f"{windows.shape}{windows.dtype}".encode())
    digest.update(np.ascontiguousarray(glucose).tobytes())
    digest.update(np.ascontiguousarray(case_id).tobytes())
    rows = np.linspace(0, windows.shape[0] - 1, FINGERPRINT_SAMPLE_ROWS).astype(np.int64)
    digest.update(np.ascontiguousarray(windows[np.unique(rows)]).tobytes())
    return digest.hexdigest()


def load_dataset(directory: Path) -> Dataset:
    """Load a dataset dir memory-mapped; raise UserError naming file, problem and row count."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(
            f"--data {directory}: no such dataset directory; `python -m trainer synth` makes one"
        )
    windows, glucose, case_id = (_load_array(directory / name) for name in DATASET_FILES[:3])
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise _fail(
            meta_path, "file is missing", "write a JSON object describing the data"
        ) from None
    except json.JSONDecodeError as error:
        raise _fail(meta_path, f"invalid JSON ({error})", "fix or rewrite it") from None
    _validate(directory, windows, glucose, case_id)
    return Dataset(
        directory, windows, glucose, case_id, meta, _fingerprint(windows, glucose, case_id)
    )


@dataclass(frozen=True)
class Splits:
    train: list[int]
    val: list[int]
    test: list[int]

    def to_dict(self) -> dict[str, list[int]]:
        return {"train": self.train, "val": self.val, "test": self.test}

    def cases(self, split: str) -> list[int]:
        if split not in ("train", "val", "test"):
            raise UserError(f"--split {split}: expected train, val or test")
        return getattr(self, split)


def split_cases(cases: np.ndarray, seed: int, val_fraction: float, test_fraction: float) -> Splits:
    """Split case ids (never windows) into train/val/test, deterministic from the seed."""
    order = np.random.default_rng(seed).permutation(np.sort(cases))
    n_test = max(1, round(len(order) * test_fraction))
    n_val = max(1, round(len(order) * val_fraction))
    if len(order) - n_test - n_val < 1:
        raise UserError(f"{len(order)} cases leave none for training; need at least {MIN_CASES}")
    test, val, train = np.split(order, [n_test, n_test + n_val])
    return Splits(train=_sorted_ids(train), val=_sorted_ids(val), test=_sorted_ids(test))


def _sorted_ids(cases: np.ndarray) -> list[int]:
    return sorted(int(case) for case in cases)


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


def epoch_permutation(n: int, seed: int, epoch: int, device: torch.device) -> torch.Tensor:
    """The order of an epoch: a pure function of (seed, epoch), drawn on the device."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator, device=device)


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
        windows = torch.from_numpy(np.asarray(dataset.windows[rows], dtype=np.float32))
        windows = ((windows - norm.input_mean) / norm.input_std).unsqueeze(1)
        labels = torch.from_numpy(np.asarray(dataset.glucose[rows], dtype=np.float32))
        self.glucose_mg_dl = labels.clone()
        labels = (labels - norm.label_mean) / norm.label_std
        self.device = device
        self.batch_size = batch_size  # global: over all ranks
        self.rank, self.world_size = rank, world_size
        self.on_device = device.type == "cpu" or _fits_on_gpu(windows, device)
        if self.on_device:
            self.windows, self.labels = windows.to(device), labels.to(device)
        else:
            self.windows, self.labels = windows.pin_memory(), labels.pin_memory()

    def __len__(self) -> int:
        return self.windows.shape[0]

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self) / self.batch_size)

    def permutation(self, seed: int, epoch: int) -> torch.Tensor:
        device = self.device if self.on_device else torch.device("cpu")
        return epoch_permutation(len(self), seed, epoch, device)

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


def _fits_on_gpu(windows: torch.Tensor, device: torch.device) -> bool:
    free_bytes, _ = torch.cuda.mem_get_info(device)
    return windows.numel() * windows.element_size() < GPU_RESIDENT_MAX_FRACTION * free_bytes


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
