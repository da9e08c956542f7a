"""Ranks of `python -m trainer train` as real processes, for the DDP tests: under
torchrun (`python -m torch.distributed.run`), or started one by one with the
environment torchrun gives its workers (RANK, WORLD_SIZE, MASTER_ADDR... : env://)
when a test must signal one rank and read each rank's own exit code."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from ops.run.distributed import DistributedLaunch
from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, log_of, start_process, trainer_command

TORCHRUN = ("-m", "torch.distributed.run")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(
    data: Path, run_dir: Path, *flags: str, launcher: tuple[str, ...] = ("--standalone",)
) -> subprocess.Popen:
    """torchrun with `launcher` flags (default: 2 ranks on this machine) over the trainer."""
    launcher = (
        ("--nproc-per-node", "2", *launcher) if "--nproc-per-node" not in launcher else launcher
    )
    arguments = [*TORCHRUN, *launcher, *trainer_command(data, run_dir, *flags)]
    return start_process(arguments, log_of(run_dir), DistributedLaunch("test", 2).env())


def launcher(
    data: Path,
    run_dir: Path,
    *flags: str,
    torchrun: tuple[str, ...] = ("--nproc-per-node", "2", "--standalone", "--max-restarts", "3"),
) -> subprocess.Popen:
    """`python -m trainer launch -- TORCHRUN -m trainer train ...`, as in the container
    (ops.run.distributed): 2 ranks on this machine unless `torchrun` says otherwise."""
    arguments = [
        "-m",
        "trainer",
        "launch",
        "--",
        *torchrun,
        *trainer_command(data, run_dir, *flags),
    ]
    return start_process(arguments, log_of(run_dir), DistributedLaunch("test", 2).env())


def start_ranks(
    data: Path,
    run_dir: Path,
    world_size: int,
    *flags: str,
    one_box: bool = True,
    rank_env: dict[int, dict[str, str]] | None = None,
) -> list[subprocess.Popen]:
    """`world_size` ranks meeting on 127.0.0.1, on one box (LOCAL_RANK = RANK) or one
    box each (LOCAL_RANK 0); each logs to run_dir/../<name>.rank<r>.log."""
    port = str(free_port())
    ranks = []
    for rank in range(world_size):
        local_rank, local_world = (rank, world_size) if one_box else (0, 1)
        env = {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world_size)}
        env |= {
            "LOCAL_WORLD_SIZE": str(local_world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        env |= (rank_env or {}).get(rank, {})
        ranks.append(
            start_process(trainer_command(data, run_dir, *flags), rank_log(run_dir, rank), env)
        )
    return ranks


def rank_log(run_dir: Path, rank: int) -> Path:
    """Rank 0 logs where a single process would (`output_of` reads it), others beside it."""
    return log_of(run_dir) if rank == 0 else run_dir.parent / f"{run_dir.name}.rank{rank}.log"


def wait_for_ranks(ranks: list[subprocess.Popen], run_dir: Path) -> list[int]:
    """Every rank's exit code, or an AssertionError with their output."""
    try:
        return [rank.wait(EXIT_WAIT_SECONDS) for rank in ranks]
    except subprocess.TimeoutExpired:
        for rank in ranks:
            rank.kill()
        outputs = "\n".join(rank_log(run_dir, r).read_text() for r in range(len(ranks)))
        raise AssertionError(f"ranks still running:\n{outputs}") from None


def worker_pid(launcher: subprocess.Popen, rank: int) -> int | None:
    """The pid of torchrun's worker with RANK=`rank`, or None while there is none."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if parent == launcher.pid and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None
