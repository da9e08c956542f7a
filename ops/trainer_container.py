"""The trainer container on the box: how it is started, found and inspected.

Names, labels, mounts, restart policy and stop timeout are ARCHITECTURE.md's "The
box" contract, which the box's resume unit and watchdog rely on too.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from invoke.exceptions import Exit

from ops import dataset_manifest
from ops.distributed_launch import DistributedLaunch
from ops.remote import Box
from ops.target import Target
from trainer import container_env
from trainer.storage import storage_environment

CONTAINER_PREFIX = "glucose-train-"
RUN_ID_LABEL = "glucose-training.run-id"
STOP_TIMEOUT_SECONDS = 120
PREEMPTED_EXIT_CODE = 75
USER_ERROR_EXIT_CODE = 2
WORKSPACE = "/workspace"
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_FILE_NAME = ".container.env"
ENV_FILE_IN_CONTAINER = "/run/glucose-training/env"
DISTRIBUTED_SHM_SIZE = "2g"


def checked_name(value: str, flag: str) -> str:
    """A run id or dataset name, fit for a container name, a path part and a shell word
    (a `--run` reaches remote commands and local paths); Exit naming `flag` otherwise."""
    if not RUN_ID_PATTERN.match(value):
        raise Exit(
            f"{flag} {value!r} is not a usable name; expected letters, digits, '.', '_' "
            "or '-' (at most 64, starting with a letter or digit)"
        )
    return value


@dataclass(frozen=True)
class Launch:
    """One start of the trainer for a run (a resume is another launch of the same id)."""

    run_id: str
    image: str
    dataset_name: str
    trainer_args: tuple[str, ...] = ()
    distributed: DistributedLaunch | None = None
    """This box's part of a run on several GPUs or boxes (torchrun); None: `train` alone."""

    def __post_init__(self) -> None:
        if not RUN_ID_PATTERN.match(self.run_id):
            raise Exit(
                f"run id {self.run_id!r} is not usable as a container name; "
                "use letters, digits, '.', '_' or '-' (at most 64)"
            )


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
    return f"{CONTAINER_PREFIX}{run_id}"


def run_dir(box_root: str, run_id: str) -> str:
    return f"{box_root}/runs/{run_id}"


def dataset_dir(box_root: str, name: str) -> str:
    return f"{box_root}/datasets/{name}"


def run_checkpoint_uri(target: Target, run_id: str) -> str:
    return f"{target.storage_uri}/runs/{run_id}"


def run_env_file(box_root: str, run_id: str) -> str:
    """The trainer's environment file: a dot file in the run dir (never mirrored), there
    for as long as the container may start again (the box's resume unit)."""
    return f"{run_dir(box_root, run_id)}/{ENV_FILE_NAME}"


def write_env_file(box: Box, path: str, env: dict[str, str]) -> None:
    """`env` into `path` on the box, 0600, through the SSH channel's stdin: no secret
    on a command line, in a log or in `docker inspect` (see trainer.container_env)."""
    quoted, partial = shlex.quote(path), shlex.quote(path + ".tmp")
    box.run_with_input(
        f"umask 077 && mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && "
        f"cat > {partial} && mv -f {partial} {quoted}",
        container_env.render(env),
    )


@contextlib.contextmanager
def one_shot_env_file(box: Box, name: str, env: dict[str, str]) -> Iterator[str | None]:
    """An env file for containers started inside this block, removed when it ends: each
    loads it as it starts, and a bind mount keeps the file it mounted. None for an
    empty `env`. `name` says whose (`fetch-<dataset>`, ...)."""
    if not env:
        yield None
        return
    path = f"{box.root}/datasets/.{name}.env"
    write_env_file(box, path, env)
    try:
        yield path
    finally:
        box.run(f"rm -f {shlex.quote(path)}", check=False)


def run_dataset_manifest(
    box: Box, image: str, user: str, volume: str, args: list[str], env_name: str
) -> str:
    """Run ops/dataset_manifest.py with `args` in the image on the box (the image holds
    trainer.storage; of containerEnv it gets what a storage client reads), with the
    dataset dir mounted as `volume`; its last line of output."""
    # The program as `-c`, not on stdin: invoke feeds a stream one byte per 10 ms, so
    # its 4 kB would take 40 s.
    source = Path(dataset_manifest.__file__).read_text()
    env = storage_environment(box.target.container_env)
    with one_shot_env_file(box, env_name, env) as env_file:
        command = shlex.join(
            [
                "docker", "run", "--rm",
                *container_options(box.target, user, env_file),
                "--volume", volume,
                "--entrypoint", "python3", image, "-c", source, *args,
            ]
        )  # fmt: skip
        return box.run(command).stdout.strip().splitlines()[-1]


def container_options(target: Target, user: str, env_file: str | None = None) -> list[str]:
    """User, network and environment shared by every container `fab` starts on the box.

    `env_file` (written by `write_env_file`) is mounted read-only and loaded by the
    image's entrypoint; the variables never appear in docker's own records.
    """
    # The SSH user owns BOX_ROOT/runs and /datasets; running as that uid keeps them
    # writable for the container and removable for the user.
    options = ["--user", user, "--env", "HOME=/tmp"]
    if target.docker_network:
        options += ["--network", target.docker_network]
    if env_file:
        # --mount, not --volume: a missing file fails the start instead of becoming a
        # directory.
        mount = f"type=bind,source={env_file},target={ENV_FILE_IN_CONTAINER},readonly"
        env_var = f"{container_env.ENV_FILE_VARIABLE}={ENV_FILE_IN_CONTAINER}"
        options += ["--mount", mount, "--env", env_var]
    return options


def docker_run_command(target: Target, launch: Launch, *, gpus: bool, user: str) -> str:
    """The `docker run` line that starts the trainer detached on the box."""
    runs = f"{WORKSPACE}/runs/{launch.run_id}"
    data = f"{WORKSPACE}/datasets/{launch.dataset_name}"
    if launch.distributed is not None and launch.distributed.boxes > 1:
        # The rendezvous, NCCL and gloo listen on the box's own address.
        target = replace(target, docker_network="host")
    args = [
        "docker", "run", "--detach",
        "--name", container_name(launch.run_id),
        "--label", f"{RUN_ID_LABEL}={launch.run_id}",
        # Docker restarts nothing: its on-failure policy restarts a crash loop forever
        # and revives user-stopped runs at the next daemon start. The box's resume
        # unit (box/resume.py) is the one restarter, for exit 75 only.
        "--restart", "no",
        "--stop-timeout", str(STOP_TIMEOUT_SECONDS),
        *container_options(target, user, env_file=_trainer_env_file(target, launch.run_id)),
        "--volume", f"{run_dir(target.box_root, launch.run_id)}:{runs}",
        "--volume", f"{dataset_dir(target.box_root, launch.dataset_name)}:{data}:ro",
    ]  # fmt: skip
    if gpus:
        args += ["--gpus", "all"]
    trainer_args = [
        "train",
        "--data", data,
        "--run-dir", runs,
        "--checkpoint-uri", run_checkpoint_uri(target, launch.run_id),
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


def _trainer_env_file(target: Target, run_id: str) -> str | None:
    return run_env_file(target.box_root, run_id) if target.container_env else None


def box_gpu_count(box: Box) -> int:
    """gpuCount from the stack, or the GPUs nvidia-smi lists (a target-file GPU box);
    0 without one."""
    if box.target.gpu_count > 0:
        return box.target.gpu_count
    listed = box.run("nvidia-smi --list-gpus", check=False)
    return len(listed.stdout.strip().splitlines()) if listed.exited == 0 else 0


def box_user(box: Box) -> str:
    return box.run("echo $(id -u):$(id -g)").stdout.strip()


def inspect_container(box: Box, run_id: str) -> ContainerState | None:
    """The run's container, or None when there is none (never started, or removed)."""
    result = box.run(f"docker inspect {shlex.quote(container_name(run_id))}", check=False)
    if result.exited != 0:
        return None
    state = json.loads(result.stdout)[0]["State"]
    restarts = json.loads(result.stdout)[0].get("RestartCount", 0)
    return ContainerState(
        run_id=run_id,
        running=bool(state["Running"]),
        restarting=bool(state.get("Restarting")),
        exit_code=int(state["ExitCode"]),
        started_at=state.get("StartedAt", ""),
        finished_at=state.get("FinishedAt", ""),
        restart_count=int(restarts),
    )


def run_ids(box: Box, *, running_only: bool = False) -> list[str]:
    """Run ids of the trainer containers on the box, newest first."""
    flag = "" if running_only else "--all "
    result = box.run(
        f"docker ps {flag}--filter label={RUN_ID_LABEL} "
        f"--format '{{{{.Label \"{RUN_ID_LABEL}\"}}}}'"
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
