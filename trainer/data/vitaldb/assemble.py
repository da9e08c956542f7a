"""The dataset files from the per-case shards, streamed: one case in memory at a time.

Each `.npy` is written as its header (the total row count is known from the case
summaries) followed by every case's rows in case-id order, straight to a temp file
that is renamed into place whole. `meta.json` goes last: its presence says the
dataset is complete.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainer.atomic_write import open_atomic, write_bytes_atomic, write_json_atomic
from trainer.data.vitaldb.case import shard_path

# (file, key in a case's shard or None for the case id, dtype)
ARRAYS = (
    ("windows.npy", "windows", np.float32),
    ("glucose.npy", "glucose", np.float32),
    ("case_id.npy", None, np.int32),
    ("window_time_s.npy", "window_time_s", np.float64),
    ("label_gap_s.npy", "label_gap_s", np.float32),
)
META = "meta.json"
SUMMARY = "prepare_summary.json"
STALE_TEMP_GLOB = ".*.tmp-*"  # trainer.atomic_write's temp names, left by a kill


def _header(handle, dtype, shape: tuple[int, ...]) -> None:
    np.lib.format.write_array_header_1_0(
        handle,
        {
            "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
            "fortran_order": False,
            "shape": shape,
        },
    )


def assemble(
    out: Path,
    shard_dir: Path,
    kept: list[tuple[int, int]],
    window_length: int,
    summary: dict,
    meta: dict,
    case_done: Callable[[int], None] = lambda assembled: None,
) -> None:
    """Write the dataset into `out` from the shards of `kept` ((case id, windows) pairs),
    calling `case_done(cases assembled so far)` after each case."""
    out = Path(out)
    for stale in out.glob(STALE_TEMP_GLOB):
        stale.unlink()
    total = sum(windows for _, windows in kept)
    with contextlib.ExitStack() as files:
        handles = {}
        for name, _, dtype in ARRAYS:
            handles[name] = files.enter_context(open_atomic(out / name, durable=True))
            shape = (total, window_length) if name == "windows.npy" else (total,)
            _header(handles[name], dtype, shape)
        for assembled, (case_id, windows) in enumerate(kept, start=1):
            with np.load(shard_path(shard_dir, case_id)) as shard:
                for name, key, dtype in ARRAYS:
                    rows = (
                        np.full(windows, case_id, dtype=dtype)
                        if key is None
                        else np.ascontiguousarray(shard[key], dtype=dtype)
                    )
                    if rows.shape[0] != windows:
                        raise RuntimeError(f"case {case_id}'s shard holds {rows.shape[0]} {key}")
                    handles[name].write(memoryview(rows).cast("B"))
            case_done(assembled)
    write_json_atomic(out / SUMMARY, summary)
    write_bytes_atomic(out / META, (json.dumps(meta, indent=2) + "\n").encode(), durable=True)
