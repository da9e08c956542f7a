"""The measured-throughput CSV: `bench --record` writes it, `fab plan` reads it.

Torch-free on purpose: `ops` imports the column list from here, so writer and reader
cannot drift apart.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

RECORD_FIELDS = (
    "date",
    "gpu",
    "gpu_count",
    "precision",
    "batch_size",
    "window_length",
    "train_windows_per_s",
    "pipeline_windows_per_s",
    "torch_version",
    "step",  # what produced the row: the formulation, "graph" (captured) or "eager"
)


def append_record(path: Path, result: dict[str, Any]) -> None:
    """Append one row to a measured-throughput CSV (header when the file is new)."""
    new = not path.exists() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RECORD_FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(result)
