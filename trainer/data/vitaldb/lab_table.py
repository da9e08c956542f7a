"""The open dataset's tables as CSV: the lab results (glucose draws) and the track list.

Read here rather than with `vitaldb.load_lab_data`, which filters wrongly: it replaces
the whole table with the rows of `caseids` even when none are asked for (so the
default returns nothing), and selects `params` among the *clinical* table's columns
instead of the lab rows' `name`. The API serves the tables gzipped, with a UTF-8 BOM
before the first column name; a local CSV may be either way.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.config import UserError

GLUCOSE_LAB_NAME = "gluc"  # mg/dL in the open dataset's lab table
# Results outside this are typing errors or another unit, not glucose in mg/dL; the
# trainer's loader refuses labels outside 10-1000 mg/dL.
GLUCOSE_PLAUSIBLE_MG_DL = (10.0, 1000.0)
PLETH_TRACK = "SNUADC/PLETH"
LAB_COLUMNS = ("caseid", "dt", "name", "result")
TRACK_COLUMNS = ("caseid", "tname")
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class GlucoseDraws:
    """One case's glucose draws, sorted by time; draws at the same second averaged."""

    dt_s: np.ndarray  # float64 seconds from the recording's start
    mg_dl: np.ndarray  # float64

    def __len__(self) -> int:
        return int(self.dt_s.size)


@dataclass(frozen=True)
class LabTable:
    draws: dict[int, GlucoseDraws]
    ignored_rows: int
    """Glucose rows whose result was not a number within the plausible range."""


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[dict[str, str]]:
    raw = Path(path).read_bytes()
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise UserError(f"{path}: damaged gzip ({error}); fetch or copy it again") from None
    reader = csv.DictReader(io.StringIO(raw.decode("utf-8-sig", errors="replace")))
    missing = [column for column in required if column not in (reader.fieldnames or [])]
    if missing:
        raise UserError(
            f"{path}: no column {', '.join(missing)} (columns: {reader.fieldnames}); "
            f"expected a CSV with {', '.join(required)}"
        )
    yield from reader


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_glucose_draws(path: Path) -> LabTable:
    """Every case's glucose draws (`name == "gluc"`) from the lab table at `path`."""
    by_case: dict[int, dict[float, list[float]]] = {}
    ignored = 0
    low, high = GLUCOSE_PLAUSIBLE_MG_DL
    for row in _rows(path, LAB_COLUMNS):
        if row["name"].strip() != GLUCOSE_LAB_NAME:
            continue
        case, dt, value = _number(row["caseid"]), _number(row["dt"]), _number(row["result"])
        if case is None or dt is None or value is None or not low <= value <= high:
            ignored += 1
            continue
        by_case.setdefault(int(case), {}).setdefault(dt, []).append(value)
    draws = {}
    for case, values in by_case.items():
        times = sorted(values)
        draws[case] = GlucoseDraws(
            dt_s=np.array(times, dtype=np.float64),
            mg_dl=np.array([sum(values[t]) / len(values[t]) for t in times], dtype=np.float64),
        )
    return LabTable(draws=draws, ignored_rows=ignored)


def cases_with_pleth(path: Path) -> set[int]:
    """Case ids the track list (caseid,tname,tid) gives a SNUADC/PLETH track."""
    cases = set()
    for row in _rows(path, TRACK_COLUMNS):
        if row["tname"].strip() == PLETH_TRACK and (case := _number(row["caseid"])) is not None:
            cases.add(int(case))
    return cases
