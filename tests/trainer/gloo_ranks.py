"""Ranks of one gloo process group as spawned processes of a test: what a CPU can prove
of several ranks in seconds (the capture agreement, the stop vote's cadence, a rank
that never joins a collective), through the trainer's own `Group`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing

from trainer.loop.distributed import Group, RankInfo

RANKS_TIMEOUT_SECONDS = 120.0


def run_ranks(work: Callable[[Group], Any], world_size: int, directory: Path) -> list[Any]:
    """`work(group)` on each of `world_size` processes joined in one gloo group; what each
    returned, in rank order. `work` must be a module-level function (or a partial of
    one): it is pickled to the processes."""
    context = torch.multiprocessing.spawn(
        _rank, args=(work, world_size, str(directory)), nprocs=world_size, join=False
    )
    deadline = time.monotonic() + RANKS_TIMEOUT_SECONDS
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(
                f"{world_size} gloo ranks still running after {RANKS_TIMEOUT_SECONDS} s"
            )
    return [
        torch.load(directory / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)
    ]


def _rank(rank: int, work: Callable[[Group], Any], world_size: int, directory: str) -> None:
    torch.set_num_threads(1)
    store = f"file://{directory}/store"
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world_size)
    group = Group(RankInfo(rank, rank, world_size, launched=True))
    try:
        result = work(group)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(directory) / f"rank{rank}.pt")
