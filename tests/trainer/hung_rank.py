"""Run as two processes by test_step_deadline.py, with torchrun's environment: rank 0
takes two steps, then a third whose all-reduce rank 1 never joins (a peer that hangs
without dying: gloo would wait 30 minutes, a graph-replayed NCCL collective forever).
Rank 0's step deadline must end it, naming step 3."""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from trainer.loop.distributed import Group, RankInfo
from trainer.loop.step_deadline import StepDeadline

HUNG_STEP = 3


def main() -> int:
    group = Group.start(RankInfo.from_env())
    if group.rank == 1:
        time.sleep(120)  # alive, never in the collective
        return 0
    deadline = StepDeadline(min_deadline_s=1.0, armed_after=0, poll_s=0.1).start()
    for step in range(1, HUNG_STEP + 1):
        deadline.begin(step)
        if step == HUNG_STEP:
            dist.all_reduce(torch.ones(1))
        deadline.end(step, lambda: True)
    print("the hung step ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
