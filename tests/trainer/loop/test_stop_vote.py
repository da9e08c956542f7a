"""The stop vote's cadence (`trainer.loop.preemption.StopVote`) on two gloo ranks: a
vote every `every_steps` steps or every `every_s` seconds, whichever is later, at the
same steps on every rank, and a stop cast by one rank acted on by both at one step.
Before, every step cast a vote: across boxes its all-reduce shares NCCL's interface
and its latency could exceed a 3.6 ms step. SIGTERM through the real trainer:
test_ddp_stop.py."""

from __future__ import annotations

import functools

from tests.trainer.gloo_ranks import run_ranks
from trainer.loop.distributed import Group
from trainer.loop.preemption import StopVote

EVERY_STEPS, EVERY_S = 4, 0.5


def _run(group: Group, seconds_a_step: float, asks_at: int | None, steps: int = 80) -> dict:
    """`steps` steps of `seconds_a_step` on a clock of their own; rank 1 asks to stop from
    step `asks_at` on. The steps that voted, and where and what the ranks stopped with."""
    now = [0.0]
    vote = StopVote(group, EVERY_STEPS, EVERY_S, clock=lambda: now[0])
    voted, stopped = [], None
    for step in range(1, steps + 1):
        now[0] += seconds_a_step
        before = vote.next_step
        code = vote(step, 1 if group.rank == 1 and asks_at and step >= asks_at else 0)
        if vote.next_step != before:
            voted.append(step)
        if code:
            stopped = (step, code)
            break
    return {"voted": voted, "stopped": stopped}


def test_fast_steps_vote_about_every_half_second_on_every_rank(tmp_path):
    ranks = run_ranks(functools.partial(_run, seconds_a_step=0.01, asks_at=None), 2, tmp_path)
    # Every 4 steps until a vote has measured the steps: then 0.5 s of 10 ms steps.
    assert ranks[0]["voted"] == ranks[1]["voted"] == [1, 5, 9, 59]


def test_slow_steps_vote_every_few_steps(tmp_path):
    ranks = run_ranks(functools.partial(_run, seconds_a_step=0.2, asks_at=None), 2, tmp_path)
    assert ranks[0]["voted"] == ranks[1]["voted"] == list(range(1, 81, EVERY_STEPS))


def test_a_stop_asked_on_one_rank_stops_both_at_one_vote(tmp_path):
    ranks = run_ranks(functools.partial(_run, seconds_a_step=0.01, asks_at=7), 2, tmp_path)
    # Cast at the vote of step 9, answered at the next vote, 0.5 s later: step 59.
    assert ranks[0]["stopped"] == ranks[1]["stopped"] == (59, 1)
