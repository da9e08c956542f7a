"""`python -m trainer bench-prepare`: how fast prepare-vitaldb turns recordings into
windows, on synthetic `.vital` cases prepared end to end (files read, checked,
filtered, judged, labelled, assembled), and what that means for M3.

The cases are written first (not timed): PLETH at 500 Hz with a gap and a flat
stretch each, amid five other waveforms as in real files (three more at 500 Hz), and
a glucose draw every 20 minutes so that every window has a label and is judged.
M3 is projected from the recording seconds one worker process prepares per second,
for the seeds' 12 M one-second windows (a lower bound on the recording behind them)
on a box with BOX_CORES cores, downloads not included.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainer.data.vitaldb.synthetic_case import Defect, write_case

DRAW_EVERY_SECONDS = 20 * 60
M3_RECORDING_SECONDS = 12_000_000  # the seeds' M3: ~12 M one-second windows
BOX_CORES = 4  # the smallest catalog GPU boxes (T4, 4 vCPUs) have 4 cores


def _write_cases(directory: Path, cases: int, seconds: float) -> Path:
    rows = ["caseid,dt,name,result"]
    for case in range(1, cases + 1):
        offset = 60.0 + 37.0 * case % (seconds / 2)
        defects = [Defect("gap", offset, offset + 20), Defect("flat", offset + 90, offset + 120)]
        bpm = 60 + 5 * (case % 8)
        write_case(directory / f"{case}.vital", seconds, bpm, case, defects, other_waves=True)
        for draw_s in range(0, int(seconds) + DRAW_EVERY_SECONDS, DRAW_EVERY_SECONDS):
            rows.append(f"{case},{draw_s},gluc,{90 + (7 * case + draw_s // 60) % 120}")
    labs = directory / "labs.csv"
    labs.write_text("\n".join(rows) + "\n")
    return labs


def measure(cases: int, minutes: float, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        vital_dir, out = Path(tmp) / "vital", Path(tmp) / "out"
        labs = _write_cases(vital_dir, cases, minutes * 60)
        # A process of its own, as a user runs it: its peak memory is then that of the
        # largest process it ran (its workers are its children), not this one's, which
        # wrote the cases.
        flags = {"--out": out, "--vital-dir": vital_dir, "--labs": labs, "--workers": workers}
        command = [sys.executable, "-m", "trainer", "prepare-vitaldb"]
        command += [str(part) for flag, value in flags.items() for part in (flag, value)]
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        wall_s = time.perf_counter() - started
        windows = json.loads((out / "meta.json").read_text())["windows"]
    processes = max(1, min(workers, cases, os.cpu_count() or 1))
    per_process = cases * minutes * 60 / wall_s / processes
    return {
        "bench": "prepare-vitaldb",
        "cases": cases,
        "minutes_per_case": minutes,
        "workers": workers,
        "cpu_cores": os.cpu_count(),
        "wall_s": round(wall_s, 2),
        "cases_per_min": round(cases / wall_s * 60, 1),
        "windows": windows,
        "windows_per_s": round(windows / wall_s),
        "recording_s_per_s_per_process": round(per_process),
        # Linux reports KiB; the largest of the preparation's processes.
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
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
        f"peak RSS {result['peak_rss_mib']} MiB (its largest process); "
        f"M3 (12 M windows) on {BOX_CORES} cores: ~{result['projected_m3_hours_on_4_cores']} h "
        "plus downloads"
    )
    return 0
