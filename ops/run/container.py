"""The trainer container on the box: the `docker run` lines `fab` starts it with.

Name, label, mounts, restart policy and stop timeout are the box contract
(`box.contract`), which the box's resume unit and watchdog rely on too. The same image
also runs one-shot jobs next to the data (`run_once`): a dataset fetched into the box's
cache, a prepared dataset published to storage.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from invoke.exceptions import Exit

from box import contract
from ops.remote.ssh import Box
from ops.run.distributed import DistributedLaunch
from ops.run.env_files import (
    ENV_FILE_IN_CONTAINER,
    one_shot_env_file,
    run_env_file,
)
from ops.run.on_box import container_name
from ops.target import local
from ops.target.schema import Target
from stack import storage_layout
from trainer import container_env
from trainer.reports.cost import RECORDS_ENV, RUNS_ENV
from trainer.storage import storage_environment

WORKSPACE = contract.WORKSPACE
BOX_RECORDS = contract.WORKSPACE_BOX_RECORDS
BOX_RUNS = contract.WORKSPACE_BOX_RUNS
DISTRIBUTED_SHM_SIZE = "2g"


@dataclass(frozen=True)
class Launch:
    """One start of the trainer for a run (a resume is another launch of the same id)."""

    run_id: str
    image: str
    dataset_name: str
    trainer_args: tuple[str, ...] = ()
    distributed: DistributedLaunch | None = None
    """This box's part of a run on several GPUs or boxes (torchrun); None: `train` alone."""
    deadline: float | None = None
    """Unix seconds: the boxes' hard stop, after which nothing starts the run again."""
    name: str = ""
    """`fab train --name`: a label for the run (the trainer records it too)."""
    data_uri: str = ""
    """Where the dataset came from: launch.json keeps it for a resume by id."""

    def __post_init__(self) -> None:
        problem = contract.name_problem(self.run_id, "run id")
        if problem:
            raise Exit(problem)


def workspace_dataset(name: str) -> str:
    """Where a container sees the box's cached dataset `name`."""
    return contract.workspace_path(contract.DATASETS_DIR, name)


def container_options(target: Target, user: str, env_file: str | None = None) -> list[str]:
    """User, network and environment shared by every container `fab` starts on the box.

    `env_file` (ops.run.env_files) is mounted read-only and loaded by the image's
    entrypoint; the variables never appear in docker's own records.
    """
    # The SSH user owns BOX_ROOT/runs and /datasets; running as that uid keeps them
    # writable for the container and removable for the user.
    options = ["--user", user, "--env", "HOME=/tmp"]
    if target.docker_network:
        options += ["--network", target.docker_network]
    options += _storage_mount(target)
    if env_file:
        # --mount, not --volume: a missing file fails the start instead of becoming a
        # directory.
        mount = f"type=bind,source={env_file},target={ENV_FILE_IN_CONTAINER},readonly"
        env_var = f"{container_env.ENV_FILE_VARIABLE}={ENV_FILE_IN_CONTAINER}"
        options += ["--mount", mount, "--env", env_var]
    return options


def volume_options(*volumes: str) -> list[str]:
    """`--volume HOST:INSIDE[:ro]` for each of `volumes`, and their host paths for the
    trainer's messages (`container_env.host_path`): `report in` a folder of the box (on
    the local target, of this machine), not one only the container has."""
    mounts = {inside: host for host, inside, *_ in (volume.split(":") for volume in volumes)}
    options = [part for volume in volumes for part in ("--volume", volume)]
    return [*options, "--env", container_env.host_paths_setting(mounts)]


def _storage_mount(target: Target) -> list[str]:
    """This machine's `file://` storage at its own path: the trainer, the dataset fetch
    and the publish use the store's URIs as they are. (On a box over SSH a `file://`
    URI names no directory of that box.)"""
    directory = local.file_storage_dir(target.storage_uri) if target.this_machine else None
    if directory is None:
        return []
    return ["--mount", f"type=bind,source={directory},target={directory}"]


def docker_run_command(target: Target, launch: Launch, *, gpus: bool, user: str) -> str:
    """The `docker run` line that starts the trainer detached on the box."""
    runs = f"{WORKSPACE}/{contract.RUNS_DIR}/{launch.run_id}"
    data = workspace_dataset(launch.dataset_name)
    if launch.distributed is not None and launch.distributed.boxes > 1:
        # The rendezvous, NCCL and gloo listen on the box's own address.
        target = replace(target, docker_network="host")
    env_file = run_env_file(target.box_root, launch.run_id) if target.container_env else None
    args = [
        "docker", "run", "--detach",
        "--name", container_name(launch.run_id),
        "--label", f"{contract.RUN_ID_LABEL}={launch.run_id}",
        # Docker restarts nothing: its on-failure policy restarts a crash loop forever
        # and revives user-stopped runs at the next daemon start. The box's resume
        # unit (box/resume.py) is the one restarter, for exit 75 only.
        "--restart", "no",
        "--stop-timeout", str(contract.STOP_TIMEOUT_SECONDS),
        *container_options(target, user, env_file=env_file),
        *volume_options(
            f"{contract.run_dir(target.box_root, launch.run_id)}:{runs}",
            f"{contract.dataset_dir(target.box_root, launch.dataset_name)}:{data}:ro",
            # The box's boot and stop records, read-only: the run's summary counts its
            # dollars by the time its box was up (trainer.reports.cost).
            f"{target.box_root}/{contract.WATCHDOG_DIR}:{BOX_RECORDS}:ro",
            # The box's other runs, read-only: a moment of the box two runs share is
            # paid half by each.
            f"{target.box_root}/{contract.RUNS_DIR}:{BOX_RUNS}:ro",
        ),
        "--env", f"{RECORDS_ENV}={BOX_RECORDS}",
        "--env", f"{RUNS_ENV}={BOX_RUNS}",
    ]  # fmt: skip
    if gpus:
        args += ["--gpus", "all"]
    trainer_args = [
        "train",
        "--data", data,
        "--run-dir", runs,
        "--checkpoint-uri", storage_layout.run_uri(target.storage_uri, launch.run_id),
        *launch.trainer_args,
    ]  # fmt: skip
    if launch.distributed is None:
        return shlex.join([*args, launch.image, *trainer_args])
    args += distributed_options(launch.distributed)
    return shlex.join([*args, launch.image, *launch.distributed.container_args(trainer_args)])


def distributed_options(plan: DistributedLaunch) -> list[str]:
    """torchrun's environment, the boxes' names and the shared memory NCCL needs."""
    options = [f"--env={name}={value}" for name, value in plan.env().items()]
    options += [f"--add-host={name}:{address}" for name, address in plan.host_entries().items()]
    # Docker's default 64 MB /dev/shm: NCCL's shared-memory transport between the GPUs
    # of a box fails in it (PyTorch's own CI gives its containers 2 GB).
    return [*options, "--shm-size", DISTRIBUTED_SHM_SIZE]


def run_once(
    box: Box, image: str, user: str, volume: str, trainer_args: list[str], env_name: str
) -> str:
    """`python -m trainer TRAINER_ARGS` in a `--rm` container of the image on the box, with
    `volume` mounted and, of containerEnv, what a storage client reads; its last line."""
    env = storage_environment(box.target.container_env)
    with one_shot_env_file(box, env_name, env) as env_file:
        command = shlex.join(
            [
                "docker", "run", "--rm",
                *container_options(box.target, user, env_file),
                *volume_options(volume),
                image, *trainer_args,
            ]
        )  # fmt: skip
        return box.run(command).stdout.strip().splitlines()[-1]
