"""Every run of a stack gathered into one folder for one TensorBoard: its event files
from storage and from the local `runs/`, and its settings and final metrics as HParams.

The stores are real `file://` stores (the local target's kind of storage) written with
the storage client the trainer mirrors with; the event files are written by torch's
SummaryWriter, as the trainer's are, and read back with TensorBoard's own loader.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import api_pb2, metadata

from ops.runs import run_cache
from ops.runs.hparams import EXPERIMENT_FILE, EXPERIMENT_PREFIX, session_file
from ops.runs.records import read_run
from tests.fakes.fake_box import FakeBox
from tests.fixtures.run_folders import put_run
from trainer.storage import open_store


def session(folder: Path) -> tuple[dict, dict[str, float], bool]:
    """What TensorBoard reads from a run's HParams file: its hyperparameters, its
    scalars, and whether the session ended."""
    hparams, scalars, ended = {}, {}, False
    for event in EventFileLoader(str(session_file(folder))).Load():
        for value in event.summary.value:
            if value.tag == metadata.SESSION_START_INFO_TAG:
                start = metadata.parse_session_start_info_plugin_data(
                    value.metadata.plugin_data.content
                )
                hparams = {key: _plain(v) for key, v in start.hparams.items()}
            elif value.tag == metadata.SESSION_END_INFO_TAG:
                ended = True
            elif value.HasField("tensor") or value.HasField("simple_value"):
                scalars[value.tag] = value.simple_value or value.tensor.float_val[0]
    return hparams, scalars, ended


def _plain(value):
    return getattr(value, value.WhichOneof("kind"))


@pytest.fixture
def stores(tmp_path: Path) -> dict:
    storage = open_store(f"file://{tmp_path / 'storage'}")
    put_run(storage, "runs/", "r-one", tmp_path, lr=1e-3, val_mae=12.5)
    put_run(storage, "runs/", "r-two", tmp_path, lr=3e-3, sweep="s-lr")
    local = tmp_path / "runs"
    put_run(open_store(f"file://{local}"), "", "r-demo", tmp_path, lr=2e-3, val_mae=20.0)
    return {"uri": f"file://{tmp_path / 'storage'}", "local": local, "cache": tmp_path / "c"}


def test_every_run_of_storage_and_of_the_local_runs_gets_a_folder_of_event_files(stores):
    gathered = run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    assert gathered.run_ids == ["r-demo", "r-one", "r-two"] and gathered.notes == []
    for run_id in gathered.run_ids:
        files = [p.name for p in (stores["cache"] / run_id).iterdir()]
        assert any(name.startswith("events.out.tfevents.") for name in files), files


def test_a_finished_run_shows_its_settings_and_final_metrics_as_hparams(stores):
    run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    hparams, scalars, ended = session(stores["cache"] / "r-one")
    assert hparams["optim.lr"] == pytest.approx(1e-3)
    assert hparams["model.arch"] == "resnet18" and hparams["dataset"] == "synth"
    assert hparams["state"] == "finished" and ended
    assert scalars == {
        "best_checkpoint/val_mae": 12.5,
        "best_checkpoint/val_rmse": 17.5,
        "best_checkpoint/test_mae": 13.5,
    }


def test_a_running_sweep_trial_names_its_sweep_and_has_no_final_metrics_yet(stores):
    run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    hparams, scalars, ended = session(stores["cache"] / "r-two")
    assert hparams["sweep"] == "s-lr" and hparams["state"] == "running"
    assert scalars == {} and not ended


def test_an_unchanged_event_file_is_not_fetched_again(stores):
    run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    copy = next(p for p in (stores["cache"] / "r-one").iterdir() if p.is_file())
    copy.write_bytes(copy.read_bytes() + b"kept")  # a fetch would replace it
    run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    assert copy.read_bytes().endswith(b"kept")


def test_a_key_that_would_leave_the_run_folder_is_skipped_and_said(stores, tmp_path):
    open_store(stores["uri"]).write_bytes("runs/r-one/tb/a\\b", b"x")
    gathered = run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    assert any("a\\b" in note for note in gathered.notes), gathered.notes
    assert not (stores["cache"] / "r-one" / "a\\b").exists()


HUGE_INTEGER = "9" * 400
HOSTILE_RUNS = {
    "an integer of 400 digits in config.json": (
        "config.json",
        f'{{"optim": {{"lr": {HUGE_INTEGER}}}}}'.encode(),
    ),
    "an integer of 400 digits in summary.json": (
        "summary.json",
        f'{{"val": {{"mae": {HUGE_INTEGER}}}}}'.encode(),
    ),
    "a summary nested 100k deep": (
        "summary.json",
        b'{"val": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ),
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE_RUNS))
def test_one_hostile_run_never_keeps_the_others_from_the_board(stores, hostile):
    name, data = HOSTILE_RUNS[hostile]
    storage = open_store(stores["uri"])
    storage.write_bytes(f"runs/r-bad/{name}", data)
    storage.write_bytes("runs/r-bad/status.json", b'{"state": "running"}')
    gathered = run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    assert {"r-demo", "r-one", "r-two"} <= set(gathered.run_ids)
    hparams, scalars, _ = session(stores["cache"] / "r-one")
    assert hparams["optim.lr"] == pytest.approx(1e-3) and scalars["best_checkpoint/val_mae"] == 12.5


@pytest.fixture
def s3_runs(moto_server, tmp_path, monkeypatch):
    """A bucket with a good run and a bad one: keys no file system here can hold as named."""
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    uri = moto_server.create_bucket(prefix="hostile")
    storage = open_store(uri)
    put_run(storage, "runs/", "r-one", tmp_path, lr=1e-3, val_mae=12.5)
    put_run(storage, "runs/", "r-bad", tmp_path, lr=1e-3, val_mae=12.5)
    return uri, storage


@pytest.mark.e2e  # moto
def test_a_tb_key_of_300_bytes_leaves_the_other_runs_whole(s3_runs, tmp_path):
    uri, storage = s3_runs
    storage.write_bytes("runs/r-bad/tb/" + "x" * 300, b"not an event file")
    gathered = run_cache.gather(uri, [], tmp_path / "cache")
    assert gathered.run_ids == ["r-bad", "r-one"]
    assert any("x" * 100 in note for note in gathered.notes), gathered.notes
    assert session(tmp_path / "cache" / "r-one")[1]["best_checkpoint/val_mae"] == 12.5


@pytest.mark.e2e  # moto
def test_a_tb_file_and_folder_of_one_name_leave_the_other_runs_whole(s3_runs, tmp_path):
    uri, storage = s3_runs
    storage.write_bytes("runs/r-bad/tb/clash", b"a file")
    storage.write_bytes("runs/r-bad/tb/clash/inside", b"and a folder of that name")
    gathered = run_cache.gather(uri, [], tmp_path / "cache")
    assert gathered.run_ids == ["r-bad", "r-one"]
    assert any("clash" in note for note in gathered.notes), gathered.notes
    assert session(tmp_path / "cache" / "r-one")[1]["best_checkpoint/val_mae"] == 12.5


def test_a_fifo_named_summary_json_never_hangs_the_gathering(stores):
    fifo = stores["local"] / "r-demo" / "summary.json"
    fifo.unlink()
    os.mkfifo(fifo)
    done: list = []
    worker = threading.Thread(
        target=lambda: done.append(run_cache.gather(None, [stores["local"]], stores["cache"])),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "gathering waits on a FIFO for a writer that never comes"
    assert done[0].run_ids == ["r-demo"]
    assert read_run(open_store(f"file://{stores['local']}"), "r-demo").state == "finished"


def experiment(cache: Path) -> tuple[list[str], list[str]]:
    """The HParams columns TensorBoard opens on: (hyperparameters, metrics), in order."""
    (path,) = cache.glob(f"{EXPERIMENT_PREFIX}*/{EXPERIMENT_FILE}")
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            if value.tag == metadata.EXPERIMENT_TAG:
                found = metadata.parse_experiment_plugin_data(value.metadata.plugin_data.content)
                return (
                    [info.name for info in found.hparam_infos],
                    [info.name.tag for info in found.metric_infos],
                )
    raise AssertionError("no experiment summary")


def test_hparams_opens_on_the_flags_that_differ_with_validation_mae_first(stores):
    run_cache.gather(stores["uri"], [stores["local"]], stores["cache"])
    hparams, metrics = experiment(stores["cache"])
    assert hparams[0] == "optim.lr" and "model.arch" not in hparams  # arch is the same
    assert metrics[0] == "best_checkpoint/val_mae"
    # Every run that ended has a test MAE, not a test RMSE: that column would hide them.
    assert "best_checkpoint/test_mae" in metrics and "best_checkpoint/test_rmse" not in metrics


def test_one_run_alone_shows_its_learning_rate(tmp_path):
    local = tmp_path / "runs"
    put_run(open_store(f"file://{local}"), "", "cpu-demo", tmp_path, lr=2e-3, val_mae=20.0)
    run_cache.gather(None, [local], tmp_path / "cache")
    hparams, _ = experiment(tmp_path / "cache")
    assert "optim.lr" in hparams


def test_a_sweeps_trials_are_compared_on_validation_metrics_alone(tmp_path):
    storage = open_store(f"file://{tmp_path / 'storage'}")
    for number, lr in enumerate((1e-3, 3e-3)):
        put_run(storage, "runs/", f"s-t00{number}", tmp_path, lr=lr, val_mae=12.0, sweep="s")
        storage.write_bytes(f"runs/s-t00{number}/summary.json", b'{"val": {"mae": 12.0}}')
    run_cache.gather(f"file://{tmp_path / 'storage'}", [], tmp_path / "cache")
    _, metrics = experiment(tmp_path / "cache")
    assert metrics == [f"best_checkpoint/val_{key}" for key in ("mae", "rmse", "mard")]


def _run_folders(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if session_file(p) is not None)


def test_a_run_is_listed_by_its_name_and_a_run_renamed_leaves_no_folder_behind(tmp_path):
    local = tmp_path / "runs"
    store = open_store(f"file://{local}")
    put_run(store, "", "sweep-20261127-101500-t003", tmp_path, lr=1e-3, val_mae=12.0)
    config = {"train": {"name": "lr search t003"}, "optim": {"lr": 1e-3}}
    store.write_bytes("sweep-20261127-101500-t003/config.json", json.dumps(config).encode())
    put_run(store, "", "r-plain", tmp_path, lr=2e-3, val_mae=13.0)
    run_cache.gather(None, [local], tmp_path / "cache")
    assert _run_folders(tmp_path / "cache") == ["lr search t003", "r-plain"]
    config["train"]["name"] = "../../escape"  # the bucket is the box's to write
    store.write_bytes("sweep-20261127-101500-t003/config.json", json.dumps(config).encode())
    run_cache.gather(None, [local], tmp_path / "cache")
    assert _run_folders(tmp_path / "cache") == ["r-plain", "sweep-20261127-101500-t003"]


def test_a_run_killed_before_its_first_upload_is_on_the_board_as_failed(tmp_path):
    # `fab train` stored the launch record; the trainer was killed before its first
    # upload; the end watch on this machine stored its end in the `file://` store.
    from ops.run.launch import store_launch_record

    uri = f"file://{tmp_path / 'storage'}"
    store_launch_record(uri, "r-killed", {"started_at": time.time() - 90, "dataset": "synth"})
    box = FakeBox(tmp_path / "box", cloud="local", storage_uri=uri)
    ended = time.time() - 30
    container = box.add_trainer(
        "r-killed", running=False, created_at=ended - 60, exit_code=137, finished_at=ended
    )
    watched = box.run("end_watch.py", container)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert run_cache.gather(uri, [], tmp_path / "cache").run_ids == ["r-killed"]
    hparams, _, _ = session(tmp_path / "cache" / "r-killed")
    assert hparams["state"] == "failed (exit 137)"


HPARAMS_SHOWN_CHARACTERS = 12
"""What HParams' Trial ID column shows of a name: it is 10em wide (TensorBoard's
`tf-hparams-table-view`), the rest cut short."""


def test_a_sweeps_trials_are_told_apart_in_what_hparams_shows_of_their_names(tmp_path):
    sweep = "sweep-20261126-121010"
    storage = open_store(f"file://{tmp_path / 'storage'}")
    for number in range(3):
        run_id = f"{sweep}-t{number:03d}"
        put_run(storage, "runs/", run_id, tmp_path, lr=1e-3 * (number + 1), sweep=sweep)
        config = {"train": {"name": f"{sweep} t{number:03d}"}, "optim": {"lr": 1e-3 * number}}
        storage.write_bytes(f"runs/{run_id}/config.json", json.dumps(config).encode())
    run_cache.gather(f"file://{tmp_path / 'storage'}", [], tmp_path / "cache")
    shown = {name[:HPARAMS_SHOWN_CHARACTERS] for name in _run_folders(tmp_path / "cache")}
    assert len(shown) == 3, shown
    assert _run_folders(tmp_path / "cache")[0] == f"t000 {sweep}"


def end_status(folder: Path) -> int | None:
    """The status a run's HParams session ended with (None: no end, running to HParams)."""
    for event in EventFileLoader(str(session_file(folder))).Load():
        for value in event.summary.value:
            if value.tag == metadata.SESSION_END_INFO_TAG:
                content = value.metadata.plugin_data.content
                return metadata.parse_session_end_info_plugin_data(content).status
    return None


def test_a_finished_run_whose_summary_has_not_reached_storage_ended_well_and_is_said(tmp_path):
    # The box gave up starting it: storage's status names what it lacks, summary.json too.
    from box.contract import UPLOADS_MISSING

    storage = open_store(f"file://{tmp_path / 'storage'}")
    missing = ["summary.json", "report.md"]
    status = {"state": "finished-upload-pending", "uploads": {UPLOADS_MISSING: missing}}
    storage.write_bytes("runs/r-pending/status.json", json.dumps(status).encode())
    gathered = run_cache.gather(f"file://{tmp_path / 'storage'}", [], tmp_path / "cache")
    hparams, _, ended = session(tmp_path / "cache" / "r-pending")
    assert hparams["state"] == "finished-upload-pending" and ended
    assert end_status(tmp_path / "cache" / "r-pending") == api_pb2.STATUS_SUCCESS
    assert [note for note in gathered.notes if "r-pending" in note] == [
        "run r-pending finished, but 2 of its files have not reached storage (summary.json, "
        "report.md); they wait on the box, and go when the run's container starts again (a "
        "cloud box's resume unit starts it a few times each boot; `docker start "
        "glucose-train-r-pending` on the box starts it now)"
    ]


def test_a_failed_run_ends_its_hparams_session_as_a_failure(tmp_path):
    storage = open_store(f"file://{tmp_path / 'storage'}")
    storage.write_bytes("runs/r-failed/status.json", b'{"state": "failed", "exit_code": 1}')
    run_cache.gather(f"file://{tmp_path / 'storage'}", [], tmp_path / "cache")
    assert end_status(tmp_path / "cache" / "r-failed") == api_pb2.STATUS_FAILURE
