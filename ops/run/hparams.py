"""One run's settings and final metrics as TensorBoard HParams summaries.

TensorBoard's HParams dashboard (its table and parallel-coordinates view are a sweep's
view) lists each folder with a session-start summary as a session: its hyperparameters
are the run's settings (config.json flattened, as `fab runs` shows them, with its
dataset, sweep and state), its metrics the `best_checkpoint/*` scalars written beside
them from summary.json (the checkpoint the run kept, on validation and test), and the
trainer's own curves in the same folder. The name sorts before the curves' `epoch/`, so
the table shows these first. Written by `fab` from
what a run left in storage, so runs that ended before this existed show too; the
protocol buffers are TensorBoard's own, built without TensorFlow or torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from ops.run.records import RunRow, finite_number

HPARAMS_FILE = "events.out.tfevents.0.fab-hparams"
"""A fixed name, rewritten at each gather; it sorts before the trainer's event files."""
FINAL_METRICS = ("mae", "rmse", "mard")
"""summary.json's `val` and `test` keys shown as `best_checkpoint/<split>_<key>`."""


def hparams_of(row: RunRow) -> dict[str, Any]:
    """The session's hyperparameters: the run's settings and where it belongs."""
    labels = {"dataset": row.dataset, "sweep": row.sweep, "state": row.state, "name": row.name}
    shown = {**{k: v for k, v in labels.items() if v}, **row.settings}
    return {key: value for key, value in shown.items() if value is not None}


def final_metrics(summary: dict | None) -> dict[str, float]:
    """`best_checkpoint/val_mae` and the like, from summary.json (none before the end)."""
    metrics = {}
    for split in ("val", "test"):
        values = (summary or {}).get(split)
        for key in FINAL_METRICS:
            value = values.get(key) if isinstance(values, dict) else None
            if finite_number(value):
                metrics[f"best_checkpoint/{split}_{key}"] = float(value)
    return metrics


def write_hparams(folder: Path, row: RunRow, summary: dict | None) -> Path:
    """(Re)write `folder`'s HParams event file for `row`; its path."""
    now = time.time()
    start = plugin_data_pb2.SessionStartInfo(start_time_secs=row.started_at or now)
    for key, value in hparams_of(row).items():
        start.hparams[key].CopyFrom(_value(value))
    events = [_plugin_summary(metadata.SESSION_START_INFO_TAG, session_start_info=start)]
    events += [
        summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        for tag, value in final_metrics(summary).items()
    ]
    if summary is not None:
        end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=now)
        events.append(_plugin_summary(metadata.SESSION_END_INFO_TAG, session_end_info=end))
    path = folder / HPARAMS_FILE
    partial = path.with_name(f"{HPARAMS_FILE}.partial")  # not an event file to TensorBoard
    with partial.open("wb") as out:
        writer = RecordWriter(out)
        records = [event_pb2.Event(wall_time=now, file_version="brain.Event:2")]
        records += [event_pb2.Event(wall_time=now, step=0, summary=s) for s in events]
        for record in records:
            writer.write(record.SerializeToString())
        writer.flush()
    partial.replace(path)
    return path


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
