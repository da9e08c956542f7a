"""One run's settings and final metrics as TensorBoard HParams summaries.

TensorBoard's HParams dashboard (its table and parallel-coordinates view are a sweep's
view) lists each folder with a session-start summary as a session: its hyperparameters
are the run's settings (config.json flattened, as `fab runs` shows them, with its
dataset, sweep and state), its metrics the `best_checkpoint/*` scalars written beside
them from summary.json (the checkpoint the run kept, on validation and test), in a
folder of the run's (SESSION_PREFIX) whose group is the run, so the table lists the run
by its name, its curves beside. Written by `fab` from
what a run left in storage, so runs that ended before this existed show too; the
protocol buffers are TensorBoard's own, built without TensorFlow or torch.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from box.contract import FINISHED_STATES, STATE_FAILED, RunSummary
from ops.runs.records import RunRow, finite_number

HPARAMS_FILE = "events.out.tfevents.0.fab-hparams"
"""In a run's session folder (SESSION_PREFIX)."""
SESSION_PREFIX = "fab-hparams-"
"""A run's HParams session: a folder in the run's, named by what it holds (the run's
settings, state and final metrics): what changed comes in a new folder, which
TensorBoard reads as a new run (it keeps a run's first summary of a tag for good), and
the one before goes. Its group is the run's folder, which HParams lists."""
EXPERIMENT_FILE = "events.out.tfevents.0.fab-experiment"
"""Which columns HParams opens on, in which order: in an EXPERIMENT_PREFIX folder."""
EXPERIMENT_PREFIX = "fab-experiment-"
"""In the cache's root, named by what it holds, as a run's session folder."""
FINAL_METRICS = ("mae", "rmse", "mard")
"""summary.json's `val` and `test` keys shown as `best_checkpoint/<split>_<key>`."""
METRIC_COLUMNS = [
    f"best_checkpoint/{split}_{key}" for split in ("val", "test") for key in FINAL_METRICS
]
"""Validation first: what sweeps select on, and what every run and trial has."""
LABELS = ("name", "state", "sweep", "dataset")
DIGEST_CHARS = 12
USUAL_FLAGS = ("optim.lr", "train.batch_size", "train.epochs", "model.arch")
"""Shown when no setting differs between the runs (one run, after `make demo`)."""


def hparams_of(row: RunRow) -> dict[str, Any]:
    """The session's hyperparameters: the run's settings and where it belongs."""
    labels = {"dataset": row.dataset, "sweep": row.sweep, "state": row.state, "name": row.name}
    shown = {**{k: v for k, v in labels.items() if v}, **row.settings}
    return {key: value for key, value in shown.items() if value is not None}


def final_metrics(summary: RunSummary | None) -> dict[str, float]:
    """`best_checkpoint/val_mae` and the like, from summary.json (none before the end)."""
    metrics = {}
    for split in ("val", "test"):
        values = getattr(summary, split) if summary else None
        for key in FINAL_METRICS:
            value = values.get(key) if isinstance(values, dict) else None
            if finite_number(value):
                metrics[f"best_checkpoint/{split}_{key}"] = float(value)
    return metrics


def write_hparams(folder: Path, row: RunRow, summary: RunSummary | None) -> Path:
    """`folder`'s HParams session for `row`, written where what it holds changed; the
    path of its event file."""
    now = time.time()
    start = plugin_data_pb2.SessionStartInfo(
        start_time_secs=row.started_at or 0.0, group_name=folder.name
    )
    for key, value in hparams_of(row).items():
        start.hparams[key].CopyFrom(_value(value))
    events = [_plugin_summary(metadata.SESSION_START_INFO_TAG, session_start_info=start)]
    events += [
        summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        for tag, value in final_metrics(summary).items()
    ]
    status = session_status(row, summary)
    if status is not None:
        end = plugin_data_pb2.SessionEndInfo(status=status)
        events.append(_plugin_summary(metadata.SESSION_END_INFO_TAG, session_end_info=end))
    return _write_once(folder, SESSION_PREFIX, HPARAMS_FILE, events, now)


def session_status(row: RunRow, summary: RunSummary | None) -> int | None:
    """How HParams' Status column shows the run: a failure once it failed, a success
    once it trained to its end (its summary, or a finished state: `finished-upload-
    pending` too, whose summary may be among the files storage lacks yet); None (running,
    to HParams) while it may go on (running, stopped, preempted, torn)."""
    if row.state.startswith(STATE_FAILED):  # `failed (exit 137)`
        return api_pb2.STATUS_FAILURE
    if summary is not None or row.state in FINISHED_STATES:
        return api_pb2.STATUS_SUCCESS
    return None


def session_file(folder: Path) -> Path | None:
    """The HParams event file of the run in `folder` (None: not one of ours)."""
    found = sorted(folder.glob(f"{SESSION_PREFIX}*/{HPARAMS_FILE}"))
    return found[-1] if found else None


def _write_once(
    folder: Path, prefix: str, name: str, summaries: list[summary_pb2.Summary], now: float
) -> Path:
    """The event file `name` of `summaries` in `folder`/<prefix><digest of them>/, written
    unless there already; every other `prefix` folder in `folder` removed."""
    digest = hashlib.sha256(b"".join(s.SerializeToString(deterministic=True) for s in summaries))
    kept = folder / f"{prefix}{digest.hexdigest()[:DIGEST_CHARS]}"
    path = kept / name
    if not path.is_file():
        kept.mkdir(parents=True, exist_ok=True)
        _write_events(path, summaries, now)
    (folder / name).unlink(missing_ok=True)  # a cache from before sessions had folders
    for other in folder.glob(f"{prefix}*"):
        if other != kept and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    return path


def _write_events(path: Path, summaries: list[summary_pb2.Summary], now: float) -> Path:
    partial = path.with_name(f"{path.name}.partial")  # not an event file to TensorBoard
    with partial.open("wb") as out:
        writer = RecordWriter(out)
        records = [event_pb2.Event(wall_time=now, file_version="brain.Event:2")]
        records += [event_pb2.Event(wall_time=now, step=0, summary=s) for s in summaries]
        for record in records:
            writer.write(record.SerializeToString())
        writer.flush()
    partial.replace(path)
    return path


def hparam_columns(rows: list[RunRow], differing: list[str]) -> list[str]:
    """The HParams columns: the flags that differ between the runs shown (the tuned ones),
    else the usual ones a run has, then what names and places a run."""
    settings = {key for row in rows for key in row.settings}
    flags = differing or [key for key in USUAL_FLAGS if key in settings]
    return [*flags, *LABELS]


def metric_columns(finals: list[dict[str, float]]) -> list[str]:
    """Validation metrics, then a test metric only where every run with final metrics has
    it: the parallel-coordinates view leaves out a run that lacks a column's value, and a
    sweep's trials have no test metrics (they are compared on validation alone)."""
    ended = [set(final) for final in finals if final]
    return [
        tag
        for tag in METRIC_COLUMNS
        if "/val_" in tag or (ended and all(tag in final for final in ended))
    ]


def write_experiment(
    folder: Path, rows: list[RunRow], differing: list[str], finals: list[dict[str, float]]
) -> Path:
    """(Re)write the experiment summary in `folder` (the cache's root): the HParams
    dashboard opens on `hparam_columns` and on `metric_columns`, validation first."""
    experiment = api_pb2.Experiment(
        hparam_infos=[
            api_pb2.HParamInfo(name=name, type=_kind(rows, name))
            for name in hparam_columns(rows, differing)
        ],
        metric_infos=[
            api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_columns(finals)
        ],
    )
    summary = _plugin_summary(metadata.EXPERIMENT_TAG, experiment=experiment)
    return _write_once(folder, EXPERIMENT_PREFIX, EXPERIMENT_FILE, [summary], time.time())


def _kind(rows: list[RunRow], name: str) -> int:
    """Numbers are an axis of the parallel coordinates; the rest are text."""
    values = [hparams_of(row).get(name) for row in rows]
    values = [value for value in values if value is not None]
    if values and all(isinstance(value, bool) for value in values):
        return api_pb2.DATA_TYPE_BOOL
    if values and all(finite_number(value) for value in values):
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def _value(value: Any) -> struct_pb2.Value:
    """Numbers stay numbers (the parallel-coordinates axes); the rest are text (a number
    no float holds too)."""
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if finite_number(value):
        return struct_pb2.Value(number_value=float(value))
    return struct_pb2.Value(string_value=str(value))


def _plugin_summary(tag: str, **data: Any) -> summary_pb2.Summary:
    content = plugin_data_pb2.HParamsPluginData(**data)
    value = summary_pb2.Summary.Value(
        tag=tag, metadata=metadata.create_summary_metadata(content), tensor=metadata.NULL_TENSOR
    )
    return summary_pb2.Summary(value=[value])
