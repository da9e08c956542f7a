"""However a run ends (stopped, finished, failed), the store holds its run dir as the box
does, train.log to its last line: a real trainer process and a `file://` store, compared
file by file as `fab download` compares the box's copy with the store's."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from box.contract import EXIT_FINISHED, EXIT_STOPPED, EXIT_USER_ERROR
from tests.trainer.trainer_process import start_training, wait_for_exit, wait_for_step
from trainer.checkpoints.layout import RUN_LOG_FILE
from trainer.checkpoints.sync import _run_files
from trainer.storage import open_store

pytestmark = pytest.mark.e2e

LONG_RUN = ("--batch-size", "8", "--epochs", "50", "--patience", "100")


def _ended(tiny_data: Path, run_dir: Path, uri: str, how: str) -> int:
    """Train until the run ends `how`; its exit code."""
    if how == "finished":
        flags = (*LONG_RUN, "--max-steps", "4")
    elif how == "failed":  # the loss is NaN by the second step: a user error, exit 2
        flags = (*LONG_RUN, "--lr", "1e30")
    else:
        flags = LONG_RUN
    process = start_training(tiny_data, run_dir, *flags, "--checkpoint-uri", uri)
    if how == "stopped":
        wait_for_step(run_dir, 3, process)
        process.send_signal(signal.SIGTERM)
    return wait_for_exit(process, run_dir)


def _differences(run_dir: Path, uri: str) -> list[str]:
    """The run's files (those the trainer mirrors, and its step files and records) whose
    stored copy is missing or not the box's, byte for byte."""
    store = open_store(uri)
    mirrored = [path.relative_to(run_dir).as_posix() for path in _run_files(run_dir)]
    steps = [f"checkpoints/{path.name}" for path in (run_dir / "checkpoints").glob("step-*")]
    differ = []
    for key in sorted([*mirrored, *steps]):
        stored = store.read_bytes(key) if store.exists(key) else None
        if stored != (run_dir / key).read_bytes():
            differ.append(f"{key}: {'missing' if stored is None else 'not the box copy'}")
    return differ


@pytest.mark.parametrize(
    ("how", "code", "last_line"),
    [
        ("stopped", EXIT_STOPPED, "stop requested (SIGTERM): checkpoint saved at step"),
        ("finished", EXIT_FINISHED, "done: test MAE"),
        ("failed", EXIT_USER_ERROR, "error: training diverged: the loss is"),
    ],
)
def test_the_store_holds_the_run_dir_as_the_box_does_with_the_runs_last_line(
    tiny_data: Path, tmp_path: Path, how: str, code: int, last_line: str
) -> None:
    run_dir, uri = tmp_path / "run", f"file://{tmp_path}/store/run"
    assert _ended(tiny_data, run_dir, uri, how) == code
    assert _differences(run_dir, uri) == []
    stored_log = open_store(uri).read_bytes(RUN_LOG_FILE).decode()
    assert stored_log.splitlines()[-1].startswith(last_line), stored_log[-2000:]
    stored_status = json.loads(open_store(uri).read_bytes("status.json"))
    assert stored_status["state"] == how and stored_status["exit_code"] == code
