"""SIGKILL at any moment, restart with the same command: on CPU the run ends with
bit-identical weights to a run that was never interrupted."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.trainer.trainer_process import (
    output_of,
    same_state,
    start_training,
    wait_for_exit,
    wait_for_step,
)
from trainer.checkpoints import checkpoint_file

pytestmark = pytest.mark.e2e

# 5 steps an epoch on the tiny data; a checkpoint every step so each kill point
# resumes from a different place (mid-epoch, at an epoch's end, in the last epoch).
FLAGS = ("--batch-size", "32", "--epochs", "3", "--patience", "100")
FLAGS += ("--checkpoint-every-steps", "1")
KILL_AT_STEPS = (3, 6, 12)
# Checkpoints are written in the background, one at a time: when step N shows, the
# write of N - 1 may still be running, but that of N - 2 is done.
STEPS_WRITTEN_BEHIND = 2


def _final_state(run_dir: Path) -> dict:
    return checkpoint_file.load(run_dir / "checkpoints" / "last.pt")


def test_sigkilled_run_resumed_ends_bit_identical(tiny_data: Path, tmp_path: Path) -> None:
    # The uninterrupted run goes beside the killed ones: it waits on its own fsyncs
    # and imports while they wait on theirs (one thread each, see start_training).
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    uninterrupted = start_training(tiny_data, straight, *FLAGS)
    for step in KILL_AT_STEPS:
        process = start_training(tiny_data, killed, *FLAGS)
        wait_for_step(killed, step, process)
        process.send_signal(signal.SIGKILL)
        assert process.wait(30) == -signal.SIGKILL
    assert wait_for_exit(start_training(tiny_data, killed, *FLAGS), killed) == 0
    assert wait_for_exit(uninterrupted, straight) == 0
    # A fresh start would end identical too (it is deterministic): each restart must
    # have resumed, from at most two steps before its kill.
    resumed = [int(n) for n in re.findall(r"^resume: step (\d+),", output_of(killed), re.M)]
    assert len(resumed) == len(KILL_AT_STEPS)
    behind = [step - at for at, step in zip(resumed, KILL_AT_STEPS, strict=True)]
    assert all(steps <= STEPS_WRITTEN_BEHIND for steps in behind)

    expected, actual = _final_state(straight), _final_state(killed)
    assert actual["step"] == expected["step"] == 15
    assert same_state(expected["model"], actual["model"])
    assert same_state(expected["optimizer"]["state"], actual["optimizer"]["state"])
