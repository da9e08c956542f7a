"""The step deadline (`trainer.loop.step_deadline`): a step that never ends ends its
process, saying which step hung, and exits non-zero for torchrun to restart the ranks.

A replayed graph's collective is invisible to NCCL's own watchdog, and a host blocked in
a graph launch never reaches the stop vote: before this deadline a peer that hung
without dying held every rank until the box's guard stopped the box, minutes later."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from box.contract import EXIT_FAILED
from tests.paths import REPO
from tests.trainer.ddp_process import free_port
from trainer.loop.step_deadline import DEADLINE_FACTOR, SHORT_BATCH_DEADLINE_SECONDS, StepDeadline

EXIT_WITHIN_SECONDS = 30


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _deadline(clock: _Clock, armed_after: int = 0, left: list | None = None) -> StepDeadline:
    leave = (left if left is not None else []).append
    return StepDeadline(
        lambda line: None, min_deadline_s=5.0, armed_after=armed_after, leave=leave, clock=clock
    )


def test_a_step_the_host_never_returns_from_is_overdue_after_the_deadline():
    clock = _Clock()
    deadline = _deadline(clock)
    deadline.begin(1)
    clock.now = 4.9
    assert deadline.overdue() is None
    clock.now = 5.1
    late, taken, _ = deadline.overdue()
    assert (late.step, late.done, taken) == (1, None, pytest.approx(5.1))


def test_a_step_queued_but_never_ended_on_the_device_is_overdue():
    clock = _Clock()
    deadline = _deadline(clock)
    for step in (1, 2):
        clock.now += 0.01
        deadline.begin(step)
        deadline.end(step, lambda step=step: step == 1)  # the device never ends step 2
    clock.now += 6
    late, _, _ = deadline.overdue()
    assert late.step == 2 and late.done is not None


def test_the_deadline_is_several_times_the_measured_step_at_least_its_floor():
    clock = _Clock()
    deadline = _deadline(clock)
    for step in range(1, 12):
        clock.now += 1.0  # 1 s steps: the deadline is DEADLINE_FACTOR of them
        deadline.begin(step)
        deadline.end(step, lambda: True)
    assert deadline.deadline_s(5.0) == DEADLINE_FACTOR * 1.0
    assert deadline.deadline_s(100.0) == 100.0


def test_the_first_steps_and_an_epochs_short_batch_take_longer():
    clock = _Clock()
    deadline = _deadline(clock, armed_after=10)
    deadline.begin(1)  # compiling, capturing: no deadline yet
    clock.now = 1000
    assert deadline.overdue() is None
    short = _deadline(clock)
    short.begin(11, full=False)  # may compile or autotune its own shape
    clock.now += SHORT_BATCH_DEADLINE_SECONDS - 1
    assert short.overdue() is None


def test_a_rank_whose_peer_never_joins_the_all_reduce_exits_naming_the_step(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    script = [sys.executable, str(REPO / "tests" / "trainer" / "hung_rank.py")]
    ranks = [
        subprocess.Popen(
            script,
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    started = time.monotonic()
    try:
        output, _ = ranks[0].communicate(timeout=EXIT_WITHIN_SECONDS)
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    assert ranks[0].returncode == EXIT_FAILED, output
    assert "watchdog: step 3 has not ended after" in output
    assert "in the host's launch (rank 0;" in output and "the hung step ended" not in output
    assert time.monotonic() - started < EXIT_WITHIN_SECONDS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_step_the_gpu_never_ends_is_overdue_on_the_device():
    clock = _Clock()
    deadline = _deadline(clock)
    deadline.begin(1)
    torch.cuda._sleep(10**10)  # a kernel that spins for seconds: the step's work
    event = torch.cuda.Event()
    event.record()
    deadline.end(1, event.query)
    clock.now = 6
    late, _, _ = deadline.overdue()
    assert late.step == 1 and late.done is not None
    torch.cuda.synchronize()
