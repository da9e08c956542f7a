"""A run's own log outlives its container: `train` keeps what it prints in train.log,
size-capped and rotated, and the mirror carries it to the run's store (a real trainer
process and a real `file://` store)."""

from __future__ import annotations

import pytest

from tests.trainer.trainer_process import output_of, start_training, wait_for_exit
from trainer.checkpoints.layout import RUN_LOG_FILE, RUN_LOG_ROTATED
from trainer.checkpoints.run_log import RunLog
from trainer.storage import open_store


@pytest.mark.e2e  # a real trainer process
def test_a_plain_runs_output_reaches_its_store_beside_the_checkpoints(tiny_data, tmp_path):
    store_uri = f"file://{tmp_path / 'store'}"
    run_dir = tmp_path / "plain-run"
    trainer = start_training(
        tiny_data, run_dir, "--epochs", "1", "--batch-size", "8", "--checkpoint-uri", store_uri
    )
    assert wait_for_exit(trainer, run_dir) == 0, output_of(run_dir)
    stored = open_store(store_uri).read_bytes(RUN_LOG_FILE).decode()
    assert stored == (run_dir / RUN_LOG_FILE).read_text()  # the box's, whole
    printed = set(output_of(run_dir).splitlines())
    assert "step" in stored and all(line in printed for line in stored.splitlines())
    # Its last line is the last one before the final upload; what follows (how long the
    # upload took) is printed alone.
    assert stored.splitlines()[-1].startswith("done: ")


def test_the_log_is_rotated_at_its_cap_keeping_the_part_before(tmp_path):
    log = RunLog(tmp_path, max_bytes=200)
    lines = [f"line {n:03d} {'x' * 40}\n" for n in range(22)]  # the last two after a rotation
    for line in lines:
        log.write(line)
    log.flush()
    current = (tmp_path / RUN_LOG_FILE).read_text()
    before = (tmp_path / RUN_LOG_ROTATED).read_text()
    assert len(current) < 200 + len(lines[0]) and len(before) < 200 + len(lines[0])
    assert "".join(lines).endswith(before + current)


def test_a_log_that_cannot_be_written_leaves_the_output_alone(tmp_path):
    (tmp_path / RUN_LOG_FILE).mkdir()  # a folder where the log goes
    log = RunLog(tmp_path)
    log.write("still printed\n")
    log.flush()
    assert (tmp_path / RUN_LOG_FILE).is_dir()
