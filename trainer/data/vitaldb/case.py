"""Prepare one case in a worker: its file, windows, labels and verdicts, as a shard.

A finished case leaves `<id>.npz` (its kept windows and their labels, times and
gaps) and then `<id>.json` (its summary); the summary's presence is what marks the
case done for a resumed preparation. Everything here is a pure function of the
case's file, its draws and the parameters, so a case prepared twice yields the same
shard and a resumed preparation the same dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.atomic_write import open_atomic, write_json_atomic
from trainer.data.vitaldb import opendata, waveform
from trainer.data.vitaldb.case_file import CaseSkipped, read_pleth
from trainer.data.vitaldb.lab_table import GlucoseDraws
from trainer.data.vitaldb.labels import label_windows


@dataclass(frozen=True)
class CaseJob:
    case_id: int
    draws: GlucoseDraws | None
    vital_path: Path
    """Where the case's file is, or where a download puts it."""
    download_url: str | None
    """None: the file is local; else fetched first and deleted once the shard is made."""
    shard_dir: Path
    window_length: int
    stride: int
    sample_rate: float
    label_method: str
    label_limit_s: float


def summary_path(shard_dir: Path, case_id: int) -> Path:
    return Path(shard_dir) / f"{case_id}.json"


def shard_path(shard_dir: Path, case_id: int) -> Path:
    return Path(shard_dir) / f"{case_id}.npz"


def _windows(job: CaseJob) -> tuple[dict[str, np.ndarray], dict]:
    """The case's kept windows (arrays for the shard) and its summary."""
    if job.draws is None or len(job.draws) == 0:
        raise CaseSkipped("no glucose draw in the lab table")
    if job.download_url is not None and not job.vital_path.is_file():
        try:
            opendata.download(job.download_url, job.vital_path)
        except opendata.DownloadError as error:
            raise CaseSkipped(f"download failed: {error}") from None
    recording = read_pleth(job.vital_path)
    conditioned = waveform.condition(recording.samples, recording.rate_hz, job.sample_rate)
    starts = waveform.window_starts(conditioned.signal.size, job.window_length, job.stride)
    centres_s = (starts + job.window_length / 2) / job.sample_rate
    labels = label_windows(job.draws, centres_s, job.label_method, job.label_limit_s)
    reasons = waveform.judge(conditioned, starts, job.window_length, labels.labelled)
    kept = np.flatnonzero(reasons == waveform.KEPT)
    counts = np.bincount(reasons, minlength=len(waveform.REJECT_REASONS) + 1)
    arrays = {
        "windows": waveform.windows_at(conditioned.signal, starts[kept], job.window_length),
        "glucose": labels.mg_dl[kept].astype(np.float32),
        "window_time_s": starts[kept] / job.sample_rate,
        "label_gap_s": labels.gap_s[kept].astype(np.float32),
    }
    summary = {
        "case": job.case_id,
        "recording_s": round(recording.seconds, 3),
        "glucose_draws": len(job.draws),
        "windows_kept": int(kept.size),
        "windows_rejected": {
            reason: int(counts[code])
            for code, reason in enumerate(waveform.REJECT_REASONS, start=1)
        },
    }
    return arrays, summary


def prepare_case(job: CaseJob) -> dict:
    """Prepare `job`'s case and record it; returns its summary. A case that cannot be
    used is skipped with its reason: one bad case never stops the others."""
    try:
        arrays, summary = _windows(job)
    except CaseSkipped as skipped:
        arrays, summary = None, {"case": job.case_id, "skipped": str(skipped)}
    except Exception as error:  # a file no reader foresaw must not end the run
        reason = f"failed ({type(error).__name__}: {error})"
        arrays, summary = None, {"case": job.case_id, "skipped": reason}
    # Writing is outside the net: a full disk stops the preparation (to be resumed),
    # it does not turn every later case into a skip.
    if arrays is not None and summary["windows_kept"]:
        with open_atomic(shard_path(job.shard_dir, job.case_id)) as handle:
            np.savez(handle, **arrays)
    write_json_atomic(summary_path(job.shard_dir, job.case_id), summary)
    if job.download_url is not None:
        job.vital_path.unlink(missing_ok=True)
    return summary
