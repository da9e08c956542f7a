"""Crash consistency: torn files, crashes on every exit path, storage down at the end,
bad numbers and foreign checkpoints; each ends with one line, a defined exit code, a
true status.json and no temp file left behind."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path

import pytest
import torch

from box.contract import STATE_UPLOAD_PENDING
from tests.trainer.conftest import tiny_run_config
from trainer.__main__ import main
from trainer.checkpoints import checkpoint_file, layout
from trainer.checkpoints import final_upload as final_upload_module
from trainer.checkpoints.manager import CheckpointConfig, CheckpointManager
from trainer.loop import launcher, run_ending
from trainer.loop import train as train_module
from trainer.loop.train import train
from trainer.reports.status import StatusWriter
from trainer.storage import open_store

WRITE_SECONDS = 30


def _status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp" in p.name or p.name.endswith(".part")]


def _with_store(config, uri: str):
    return dataclasses.replace(config, checkpoint_uri=uri, checkpoint_every_steps=1)


def test_a_torn_last_metrics_line_is_dropped_with_a_warning(
    tiny_data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2)) == 0
    with (run_dir / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"kind": "train", "st')  # the host died mid-write
    with caplog.at_level(logging.WARNING):
        assert train(tiny_run_config(tiny_data, run_dir, max_steps=4)) == 0
    assert "dropped 1 torn line(s)" in caplog.text
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]


def test_metrics_are_on_disk_before_each_checkpoint(tmp_path: Path, monkeypatch) -> None:
    from tests.trainer.conftest import tiny_state

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    manager = CheckpointManager(CheckpointConfig(run_dir / "checkpoints"))
    manager.save_last(tiny_state(step=1))
    assert manager.flush(WRITE_SECONDS)
    names = [Path(path).name for path in synced]
    first_checkpoint_write = next(i for i, name in enumerate(names) if "step-" in name)
    assert "metrics.jsonl" in names[:first_checkpoint_write]


CRASHES = {
    "RunOutputs": ("trainer.loop.train.RunOutputs", RuntimeError("tensorboard could not start")),
    "finish": ("trainer.loop.train.finish", RuntimeError("plotting failed")),
}


@pytest.mark.parametrize("where", sorted(CRASHES))
def test_a_crash_outside_the_loop_ends_failed_with_the_outbox_flushed(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    target, error = CRASHES[where]
    uri, run_dir = f"file://{tmp_path}/store/run", tmp_path / "run"
    assert train(_with_store(tiny_run_config(tiny_data, run_dir, max_steps=2), uri)) == 0

    def crash(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(target, crash)
    config = _with_store(tiny_run_config(tiny_data, run_dir, max_steps=4), uri)
    with pytest.raises(RuntimeError, match=str(error)):
        train(config)
    status = _status(run_dir)
    assert (status["state"], status["exit_code"]) == ("failed", 1)
    assert not list((run_dir / "checkpoints" / ".outbox").glob("*"))
    store = open_store(uri)
    newest = max(p.name for p in (run_dir / "checkpoints").glob("step-*.pt"))
    assert layout.read_pointer(store, layout.LATEST_KEY) == newest
    assert json.loads(store.read_bytes("status.json"))["state"] == "failed"


def test_a_failing_status_write_still_ends_failed(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = StatusWriter.write

    def write_but_not_finished(self, **changes):
        if changes.get("state") == "finished":
            raise OSError(28, "No space left on device", str(self.path))
        write(self, **changes)

    monkeypatch.setattr(StatusWriter, "write", write_but_not_finished)
    run_dir = tmp_path / "run"
    with pytest.raises(OSError, match="No space left"):
        train(tiny_run_config(tiny_data, run_dir, max_steps=2))
    assert (_status(run_dir)["state"], _status(run_dir)["exit_code"]) == ("failed", 74)


def _storage_dies_before_finish(monkeypatch: pytest.MonkeyPatch, store_dir: Path) -> None:
    """The store's directory turns into a file as training ends: every upload fails."""
    finish = train_module.finish

    def outage_then_finish(*args, **kwargs):
        # The low-priority uploader may not have begun its first upload yet (seen on
        # a loaded machine): the store is down from here either way.
        store_dir.mkdir(parents=True, exist_ok=True)
        # A rename, not rmtree: the uploader may be writing into it right now.
        store_dir.rename(store_dir.with_name("store-before-the-outage"))
        store_dir.write_text("storage is down")
        return finish(*args, **kwargs)

    monkeypatch.setattr(train_module, "finish", outage_then_finish)
    monkeypatch.setattr(run_ending, "FINAL_UPLOAD_SECONDS", 2.0)
    monkeypatch.setattr(final_upload_module, "SYNC_SECONDS", 2.0)


def _finished_with_storage_down(tiny_data: Path, tmp_path: Path, monkeypatch, max_steps: int):
    """A run that trained to its end as its store went down: (config, run dir, store
    dir, store URI), its status `finished-upload-pending`."""
    store_dir, run_dir = tmp_path / "store", tmp_path / "run"
    uri = f"file://{store_dir}"
    config = _with_store(tiny_run_config(tiny_data, run_dir, max_steps=max_steps), uri)
    _storage_dies_before_finish(monkeypatch, store_dir)
    assert train(config) == 0
    assert _status(run_dir)["state"] == STATE_UPLOAD_PENDING
    return config, run_dir, store_dir, uri


def test_a_finished_run_with_storage_down_is_upload_pending_until_sync(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the first epoch's end (5 steps): a best checkpoint waits too.
    config, run_dir, store_dir, uri = _finished_with_storage_down(
        tiny_data, tmp_path, monkeypatch, max_steps=7
    )
    assert train(config) == 0  # its container starts again; storage still down
    assert _status(run_dir)["state"] == STATE_UPLOAD_PENDING
    assert main(["sync", "--run-dir", str(run_dir), "--checkpoint-uri", uri]) == 75

    store_dir.unlink()  # storage is back
    assert main(["sync", "--run-dir", str(run_dir), "--checkpoint-uri", uri]) == 0
    assert _status(run_dir)["state"] == "finished"
    store = open_store(uri)
    newest = max(p.name for p in (run_dir / "checkpoints").glob("step-*.pt"))
    assert layout.read_pointer(store, layout.LATEST_KEY) == newest
    best = run_dir / "checkpoints" / "best.pt"
    best_name = next(p.name for p in best.parent.glob("step-*.pt") if p.samefile(best))
    assert layout.read_pointer(store, layout.BEST_KEY) == best_name
    assert {"summary.json", "report.md", "metrics.jsonl"} <= set(store.list())
    assert json.loads(store.read_bytes("status.json"))["state"] == "finished"


def test_the_next_start_of_an_upload_pending_run_finishes_its_uploads(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, run_dir, store_dir, uri = _finished_with_storage_down(
        tiny_data, tmp_path, monkeypatch, max_steps=2
    )
    store_dir.unlink()
    assert train(config) == 0
    assert _status(run_dir)["state"] == "finished"
    assert "summary.json" in open_store(uri).list()


def test_an_upload_pending_run_relaunched_under_torchrun_uploads_alone(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Box 0 of a finished multi-box run: the other boxes stay down, so ranks started
    # here would wait in the rendezvous for nobody; the launch uploads and ends.
    _, run_dir, store_dir, uri = _finished_with_storage_down(
        tiny_data, tmp_path, monkeypatch, max_steps=2
    )
    store_dir.unlink()

    def no_torchrun(*args, **kwargs):
        raise AssertionError("torchrun started for a run with only uploads left")

    monkeypatch.setattr(launcher, "launch", no_torchrun)
    torchrun = ["--nproc-per-node", "2", "--standalone", "-m", "trainer", "train"]
    train_args = ["--data", str(tiny_data), "--run-dir", str(run_dir), "--checkpoint-uri", uri]
    assert main(["launch", "--", *torchrun, *train_args, "--batch-size", "8"]) == 0
    assert _status(run_dir)["state"] == "finished"
    assert "summary.json" in open_store(uri).list()


@pytest.mark.parametrize("lr", ["inf", "nan", "-1"])
def test_a_learning_rate_that_is_no_positive_number_is_one_line(
    tiny_data: Path, tmp_path: Path, lr: str, capsys
) -> None:
    argv = ["train", "--data", str(tiny_data), "--run-dir", str(tmp_path / "r"), "--lr", lr]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"error: --lr {float(lr)}: must be a positive number"


def test_a_diverging_run_stops_with_one_line_and_exit_2(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", "--data", str(tiny_data), "--run-dir", str(run_dir), "--model", "resnet18"]
    argv += ["--batch-size", "32", "--lr", "1e38", "--log-every", "1", "--max-steps", "20"]
    assert main(argv) == 2
    assert "error: training diverged: the loss is" in capsys.readouterr().err
    assert (_status(run_dir)["state"], _status(run_dir)["exit_code"]) == ("failed", 2)


def test_a_step_file_without_its_record_is_set_aside_not_resumed(
    tiny_data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2)) == 0
    checkpoints = run_dir / "checkpoints"
    for record in checkpoints.glob("*.sha256"):
        record.unlink()
    with caplog.at_level(logging.WARNING):
        assert train(tiny_run_config(tiny_data, run_dir, max_steps=1)) == 0
    assert "no step-000000002-epoch-0000.pt.sha256 record" in caplog.text
    assert (checkpoints / "step-000000002-epoch-0000.pt.damaged").exists()


def test_evaluating_a_checkpoint_of_foreign_structure_is_one_line(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    foreign = tmp_path / "someone-elses.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "epoch": "three"}, foreign)
    argv = ["evaluate", "--data", str(tiny_data), "--checkpoint", str(foreign)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --checkpoint: {foreign}: not a trainer checkpoint (no ")
    assert "\n" not in err


def test_link_atomic_leaves_no_temp_file_when_the_link_is_already_right(tmp_path: Path) -> None:
    from tests.trainer.conftest import tiny_state

    step = tmp_path / "step-000000001-epoch-0000.pt"
    checkpoint_file.save(step, tiny_state(step=1))
    checkpoint_file.link_atomic(step, tmp_path / "last.pt")
    checkpoint_file.link_atomic(step, tmp_path / "last.pt")
    assert _temp_files(tmp_path) == []
    assert checkpoint_file.load(tmp_path / "last.pt", require_record=True)["step"] == 1
