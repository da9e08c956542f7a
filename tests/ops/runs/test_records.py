"""`fab runs`' row of one run, read from its folder's files without trusting them."""

from __future__ import annotations

import json

from ops.runs.records import read_run
from trainer.storage import open_store


def _store(tmp_path, files: dict[str, bytes]):
    store = open_store(f"file://{tmp_path / 'storage'}")
    for name, data in files.items():
        store.write_bytes(f"runs/r1/{name}", data)
    return store


EPOCH = json.dumps({"kind": "epoch", "step": 10, "epoch": 1, "val_mae": 14.0}).encode()


def test_a_400_digit_mae_in_summary_json_is_no_best_mae_and_no_torn_row(tmp_path):
    summary = '{"val": {"mae": %s}, "epochs": 3}' % ("9" * 400)
    store = _store(tmp_path, {"summary.json": summary.encode()})
    row = read_run(store, "r1", "runs/")
    assert (row.state, row.best_val_mae, row.epochs, row.problems) == ("finished", None, 3, ())


def test_an_empty_summary_leaves_the_best_mae_to_the_epoch_records(tmp_path):
    store = _store(tmp_path, {"summary.json": b"{}", "metrics.jsonl": EPOCH})
    row = read_run(store, "r1", "runs/")
    assert (row.state, row.best_val_mae) == ("finished", 14.0)


def test_a_run_reads_its_dataset_sweep_and_start_from_fab_trains_launch_record(tmp_path):
    launch = {"started_at": 100.0, "dataset": "synth", "sweep": "s1", "boxes": "two"}
    status = {"state": "running", "updated_at": 160.0, "recoveries": 1}
    store = _store(
        tmp_path,
        {"launch.json": json.dumps(launch).encode(), "status.json": json.dumps(status).encode()},
    )
    row = read_run(store, "r1", "runs/")
    assert (row.dataset, row.sweep, row.started_at, row.wall_s) == ("synth", "s1", 100.0, 60.0)
    assert row.recoveries == 1
