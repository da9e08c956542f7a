"""`python -m trainer bench-prepare`: how fast prepare-vitaldb turns recordings into
windows, on synthetic `.vital` cases prepared end to end (files read, checked,
filtered, judged, labelled, assembled), and what that means for M3.

The cases are written first (not timed): PLETH at 500 Hz with a gap and a flat
stretch each, and a glucose draw every 20 minutes so that every window has a label
and is judged. M3 is projected from the recording seconds one worker process
prepares per second, for the seeds' 12 M one-second windows (a lower bound on the
recording behind them) on a box with BOX_CORES cores, downloads not included.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path

from trainer.vitaldb.config import PrepareConfig
from trainer.vitaldb.prepare import prepare_vitaldb
from trainer.vitaldb.synthetic_case import Defect, write_case

DRAW_EVERY_SECONDS = 20 * 60
M3_RECORDING_SECONDS = 12_000_000  # the seeds' M3: ~12 M one-second windows
BOX_CORES = 4  # the smallest catalog GPU boxes (T4, 4 vCPUs) have 4 cores


def _write_cases(directory: Path, cases: int, seconds: float) -> Path:
    rows = ["caseid,dt,name,result"]
    for case in range(1, cases + 1):
        offset = 60.0 + 37.0 * case % (seconds / 2)
        defects = [Defect("gap", offset, offset + 20), Defect("flat", offset + 90, offset + 120)]
        write_case(directory / f"{case}.vital", seconds, 60 + 5 * (case % 8), case, defects)
        for draw_s in range(0, int(seconds) + DRAW_EVERY_SECONDS, DRAW_EVERY_SECONDS):
            rows.append(f"{case},{draw_s},gluc,{90 + (7 * case + draw_s // 60) % 120}")
    labs = directory / "labs.csv"
    labs.write_text("\n".join(rows) + "\n")
    return labs


def _peak_rss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def measure(cases: int, minutes: float, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        vital_dir = Path(tmp) / "vital"
        labs = _write_cases(vital_dir, cases, minutes * 60)
        config = PrepareConfig(
            out=Path(tmp) / "out", vital_dir=vital_dir, labs=labs, workers=workers
        )
        started = time.perf_counter()
        outcome = prepare_vitaldb(config)
        wall_s = time.perf_counter() - started
    processes = max(1, min(workers, cases, os.cpu_count() or 1))
    recording_s = cases * minutes * 60
    per_process = recording_s / wall_s / processes
    return {
        "bench": "prepare-vitaldb",
        "cases": cases,
        "minutes_per_case": minutes,
        "workers": workers,
        "cpu_cores": os.cpu_count(),
        "wall_s": round(wall_s, 2),
        "cases_per_min": round(cases / wall_s * 60, 1),
        "windows": outcome.windows,
        "windows_per_s": round(outcome.windows / wall_s),
        "recording_s_per_s_per_process": round(per_process),
        "peak_rss_mib": {
            "main": round(_peak_rss_mib(resource.RUSAGE_SELF)),
            "largest_worker": round(_peak_rss_mib(resource.RUSAGE_CHILDREN)),
        },
        "projected_m3_hours_on_4_cores": round(
            M3_RECORDING_SECONDS / (per_process * BOX_CORES) / 3600, 2
        ),
    }


def run_bench_prepare(cases: int, minutes: float, workers: int, json_output: bool) -> int:
    result = measure(cases, minutes, workers)
    if json_output:
        print(json.dumps(result))
        return 0
    print(
        f"prepare-vitaldb: {result['cases']} synthetic {minutes:g}-minute cases, "
        f"{result['workers']} workers on {result['cpu_cores']} cores: {result['wall_s']} s, "
        f"{result['cases_per_min']} cases/min, {result['windows_per_s']} windows/s; "
        f"peak RSS {result['peak_rss_mib']['main']} MiB (main), "
        f"{result['peak_rss_mib']['largest_worker']} MiB (largest worker); "
        f"M3 (12 M windows) on {BOX_CORES} cores: ~{result['projected_m3_hours_on_4_cores']} h "
        "plus downloads"
    )
    return 0
