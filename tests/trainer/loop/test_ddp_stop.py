"""Stopping and restarting a DDP run (CPU, gloo): SIGTERM or a spot notice on one rank
stops every rank at the same step, with one checkpoint from rank 0; a SIGKILLed rank
takes the group down and torchrun restarts it from the last checkpoint; a stopped run
resumes bit-identically at its world size, and at another one saying so."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from box.contract import EXIT_STOPPED
from tests.trainer.ddp_process import start_ranks, torchrun, wait_for_ranks, worker_pid
from tests.trainer.trainer_process import (
    output_of,
    same_state,
    start_training,
    status_of,
    wait_for_exit,
    wait_for_step,
)
from trainer.checkpoints import checkpoint_file

pytestmark = pytest.mark.e2e

# Batch 8 on the tiny data: 18 steps an epoch. The ranks vote on stopping every 4 steps
# or 0.5 s, whichever is later (`trainer.loop.preemption.StopVote`), so a SIGTERM at
# step 3 stops them a vote or two later, before the run's end.
FLAGS = ("--batch-size", "8", "--epochs", "2", "--patience", "100")
STEPS_PER_EPOCH = 18
# Azure's spot notice leaves 30 s: the vote, the checkpoint and the exits fit well inside.
STOPPED_WITHIN_SECONDS = 30


@dataclass(frozen=True)
class Stopped:
    run_dir: Path
    exit_codes: list[int]
    seconds: float  # from the signal to both ranks' exits


@pytest.fixture(scope="module")
def stopped(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Stopped:
    """A 2-rank run whose rank 1 got SIGTERM at step 3; tests copy it before resuming."""
    run_dir = tmp_path_factory.mktemp("ddp-stop") / "run"
    ranks = start_ranks(tiny_data, run_dir, 2, *FLAGS)
    wait_for_step(run_dir, 3, ranks[0])
    ranks[1].send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    codes = wait_for_ranks(ranks, run_dir)
    return Stopped(run_dir, codes, time.monotonic() - signalled)


def _step_files(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob(checkpoint_file.STEP_FILE_GLOB))


def test_sigterm_to_one_rank_stops_every_rank_at_one_step_with_one_checkpoint(
    stopped: Stopped,
) -> None:
    assert stopped.exit_codes == [EXIT_STOPPED, EXIT_STOPPED]
    assert stopped.seconds < STOPPED_WITHIN_SECONDS
    status = status_of(stopped.run_dir)
    assert status["state"] == "stopped" and status["exit_code"] == EXIT_STOPPED
    # An epoch may end (and save) before the vote that stops: the stop saves once, at
    # the step every rank stopped at.
    *epoch_ends, saved = _step_files(stopped.run_dir)
    state = checkpoint_file.load(saved)
    assert state["step"] == status["step"] and 0 < state["step_in_epoch"] <= STEPS_PER_EPOCH
    assert all(checkpoint_file.load(path)["step_in_epoch"] == 0 for path in epoch_ends)
    assert "stop requested (a stop request on another rank)" in output_of(stopped.run_dir)


def test_stopped_run_resumes_at_its_world_size_bit_identical(
    stopped: Stopped, tiny_data: Path, tmp_path: Path
) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    shutil.copytree(stopped.run_dir, resumed)
    ranks = start_ranks(tiny_data, straight, 2, *FLAGS) + start_ranks(tiny_data, resumed, 2, *FLAGS)
    assert wait_for_ranks(ranks[:2], straight) == [0, 0]
    assert wait_for_ranks(ranks[2:], resumed) == [0, 0]
    assert f"resume: step {status_of(stopped.run_dir)['step']}," in output_of(resumed)
    expected = checkpoint_file.load(straight / "checkpoints" / "last.pt")
    actual = checkpoint_file.load(resumed / "checkpoints" / "last.pt")
    assert actual["step"] == expected["step"] == 2 * STEPS_PER_EPOCH
    assert same_state(expected["model"], actual["model"])
    assert same_state(expected["optimizer"]["state"], actual["optimizer"]["state"])


def test_stopped_run_resumes_at_another_world_size_and_says_what_changed(
    stopped: Stopped, tiny_data: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "one-rank"
    shutil.copytree(stopped.run_dir, run_dir)
    assert wait_for_exit(start_training(tiny_data, run_dir, *FLAGS), run_dir) == 0
    output = output_of(run_dir)
    assert (
        "resume: world size 2 -> 1: per-rank batch 4 -> 8, global batch 8, learning rate "
        "and steps per epoch unchanged" in output
    )
    assert f"resume: step {status_of(stopped.run_dir)['step']}," in output
    assert status_of(run_dir)["state"] == "finished"


def test_stopped_run_resumes_on_three_ranks_whose_shares_differ_by_one(
    stopped: Stopped, tiny_data: Path, tmp_path: Path
) -> None:
    # The run's global batch of 8 does not divide by 3: shares of 3, 3 and 2 (it exited 2).
    run_dir = tmp_path / "three-ranks"
    shutil.copytree(stopped.run_dir, run_dir)
    three = ("--standalone", "--nproc-per-node", "3")
    flags = ("--epochs", "2", "--patience", "100")  # the batch: the run's own
    assert wait_for_exit(torchrun(tiny_data, run_dir, *flags, launcher=three), run_dir) == 0
    assert (
        "resume: world size 2 -> 3: per-rank batch 4 -> 3, global batch 8, learning rate "
        "and steps per epoch unchanged" in output_of(run_dir)
    )
    assert status_of(run_dir)["state"] == "finished"


def test_azure_preempt_seen_on_another_box_preempts_every_rank(
    tiny_data: Path, tmp_path: Path, fake_metadata
) -> None:
    # Two "boxes" of one rank each: each rank is its box's local rank 0, the one that
    # polls; only rank 1's box is being evicted.
    run_dir = tmp_path / "run"
    evicted = {1: {"GLUCOSE_IMDS_URL": fake_metadata.url}}
    long_run = ("--batch-size", "8", "--epochs", "50")
    ranks = start_ranks(tiny_data, run_dir, 2, *long_run, one_box=False, rank_env=evicted)
    wait_for_step(run_dir, 2, ranks[0])
    event = fake_metadata.azure_preempt()
    assert wait_for_ranks(ranks, run_dir) == [EXIT_STOPPED, EXIT_STOPPED]
    status = status_of(run_dir)
    assert status["state"] == "preempted"
    # The notice is polled once a second, so an epoch may end (and save) before it is
    # seen: the stop saves once more, at the step every rank stopped at.
    *epoch_ends, saved = _step_files(run_dir)
    assert checkpoint_file.load(saved)["step"] == status["step"]
    assert all(checkpoint_file.load(p)["step_in_epoch"] == 0 for p in epoch_ends)
    assert "stop requested (a spot notice on another rank)" in output_of(run_dir)
    assert fake_metadata.acknowledged == [event]  # by rank 1, on the box being evicted


def test_sigkilled_rank_is_restarted_by_torchrun_and_the_run_resumes(
    tiny_data: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    elastic = ("--standalone", "--nproc-per-node", "2", "--max-restarts", "1")
    flags = ("--batch-size", "8", "--epochs", "1", "--checkpoint-every-steps", "1")
    launcher = torchrun(tiny_data, run_dir, *flags, launcher=elastic)
    wait_for_step(run_dir, 4, launcher)
    pid = worker_pid(launcher, 1)
    assert pid is not None, output_of(run_dir)
    os.kill(pid, signal.SIGKILL)
    assert wait_for_exit(launcher, run_dir) == 0
    resumed = [int(step) for step in re.findall(r"^resume: step (\d+),", output_of(run_dir), re.M)]
    assert len(resumed) == 1 and resumed[0] >= 2, output_of(run_dir)
    assert status_of(run_dir)["state"] == "finished"
