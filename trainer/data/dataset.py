"""A dataset dir: loading and validation, its fingerprint, and case-level splits.

The windows stay memory-mapped; `trainer.data.pipeline` turns a split into the
tensor the loop indexes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.config import UserError

GLUCOSE_RANGE_MG_DL = (10.0, 1000.0)
MIN_CASES = 3
MIN_WINDOW_LENGTH = 32
FINGERPRINT_SAMPLE_ROWS = 256
SCAN_CHUNK_ROWS = 65_536  # bounds memory while scanning a memory-mapped windows.npy
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


def _unreadable(path: Path) -> UserError:
    # Not the run dir's "cannot write" (exit 74): the dataset is input, a user error.
    return _fail(
        path,
        "permission denied",
        f"make the dataset dir and its files readable by uid {os.getuid()}, the trainer's user",
    )


def _load_array(path: Path) -> np.ndarray:
    try:
        if not path.is_file():
            raise _fail(path, "file is missing", "a dataset dir needs " + ", ".join(DATASET_FILES))
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except PermissionError:
        raise _unreadable(path) from None
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
    except PermissionError:
        raise _unreadable(meta_path) from None
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
