"""What the box has: its trainer containers, its GPUs, the SSH user's uid."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from invoke.exceptions import Exit

from box import contract
from ops.remote.ssh import Box
from ops.run.names import checked_name


@dataclass(frozen=True)
class ContainerState:
    """`docker inspect` of a trainer container, what `status` needs of it."""

    run_id: str
    running: bool
    restarting: bool
    exit_code: int
    started_at: str
    finished_at: str
    restart_count: int


def container_name(run_id: str) -> str:
    return f"{contract.TRAIN_CONTAINER_PREFIX}{run_id}"


def inspect_container(box: Box, run_id: str) -> ContainerState | None:
    """The run's container, or None when there is none (never started, or removed)."""
    return inspect_named(box, container_name(run_id), run_id)


def inspect_named(box: Box, name: str, run_id: str) -> ContainerState | None:
    """The container `name` (of run, or sweep, `run_id`), or None when there is none."""
    result = box.run(f"docker inspect {shlex.quote(name)}", check=False)
    if result.exited != 0:
        return None
    found = json.loads(result.stdout)[0]
    state = found["State"]
    return ContainerState(
        run_id=run_id,
        running=bool(state["Running"]),
        restarting=bool(state.get("Restarting")),
        exit_code=int(state["ExitCode"]),
        started_at=state.get("StartedAt", ""),
        finished_at=state.get("FinishedAt", ""),
        restart_count=int(found.get("RestartCount", 0)),
    )


def run_ids(box: Box, *, running_only: bool = False) -> list[str]:
    """Run ids of the trainer containers on the box, newest first."""
    flag = "" if running_only else "--all "
    label = contract.RUN_ID_LABEL
    result = box.run(
        f"docker ps {flag}--filter label={label} --format '{{{{.Label \"{label}\"}}}}'"
    )
    return [line for line in result.stdout.split() if line]


def resolve_run_id(box: Box, run_id: str | None) -> str:
    """The given run id, or the newest run on the box; Exit when there is none."""
    if run_id:
        return checked_name(run_id, "--run")
    ids = run_ids(box)
    if not ids:
        raise Exit(f"no trainer run on {box.address}; start one with `fab train`")
    # A label is whatever the box's docker says: checked like a flag.
    return checked_name(ids[0], f"the newest run's label on {box.address}")


def box_gpu_count(box: Box) -> int:
    """gpuCount from the stack, or the GPUs nvidia-smi lists (a target-file GPU box);
    0 without one."""
    if box.target.gpu_count > 0:
        return box.target.gpu_count
    listed = box.run("nvidia-smi --list-gpus", check=False)
    return len(listed.stdout.strip().splitlines()) if listed.exited == 0 else 0


def box_user(box: Box) -> str:
    """`uid:gid` of the SSH user, which the box's containers run as."""
    return box.run("echo $(id -u):$(id -g)").stdout.strip()
