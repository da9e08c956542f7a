"""A sweep on the box: its folder, its driver's container, its stop.

The driver (`python -m trainer sweep`) runs in the trainer image, in a container named
and labelled by the box contract (`glucose-sweep-<id>`), restart policy `no` like a
trainer's: the box's resume unit restarts it after an eviction or a nightly stop.
It mounts the sweep's folder, the box's whole `runs/` (its trials are runs, made as
it goes), and read-only the dataset and the box's boot and stop records; `containerEnv`
reaches it as a run's does, in a 0600 dot file of the sweep's folder (never mirrored).
"""

from __future__ import annotations

import shlex

from invoke.exceptions import Exit

from box import contract
from ops.remote.ssh import Box
from ops.run import env_files
from ops.run.container import BOX_RECORDS, WORKSPACE, container_options, workspace_dataset
from ops.run.on_box import ContainerState, inspect_named
from stack import storage_layout
from trainer.config import UserError
from trainer.reports.cost import RECORDS_ENV
from trainer.sweep.spec import SPEC_FILE, SweepSpec

RUNS_IN_CONTAINER = f"{WORKSPACE}/{contract.RUNS_DIR}"


def container_name(sweep_id: str) -> str:
    return f"{contract.SWEEP_CONTAINER_PREFIX}{sweep_id}"


def folder_in_container(sweep_id: str) -> str:
    return f"{WORKSPACE}/{contract.SWEEPS_DIR}/{sweep_id}"


def env_file(box_root: str, sweep_id: str) -> str:
    return f"{contract.sweep_dir(box_root, sweep_id)}/{env_files.ENV_FILE_NAME}"


def docker_run_command(box: Box, spec: SweepSpec, *, gpus: bool, user: str) -> str:
    """The `docker run` line that starts the sweep's driver detached."""
    target, sweep_id = box.target, spec.sweep_id
    env = env_file(box.root, sweep_id) if target.container_env else None
    args = [
        "docker", "run", "--detach",
        "--name", container_name(sweep_id),
        "--label", f"{contract.SWEEP_LABEL}={sweep_id}",
        # As a trainer: the box's resume unit is the one restarter (box/resume.py).
        "--restart", "no",
        "--stop-timeout", str(contract.STOP_TIMEOUT_SECONDS),
        *container_options(target, user, env_file=env),
        "--volume", f"{contract.sweep_dir(box.root, sweep_id)}:{folder_in_container(sweep_id)}",
        "--volume", f"{box.root}/{contract.RUNS_DIR}:{RUNS_IN_CONTAINER}",
        "--volume",
        f"{contract.dataset_dir(box.root, spec.dataset)}:{workspace_dataset(spec.dataset)}:ro",
        # The box's boot and stop records, as a run's container has them: each trial's
        # summary counts its share of the box's up time (trainer.reports.cost).
        "--volume", f"{box.root}/{contract.WATCHDOG_DIR}:{BOX_RECORDS}:ro",
        "--env", f"{RECORDS_ENV}={BOX_RECORDS}",
    ]  # fmt: skip
    if gpus:
        args += ["--gpus", "all"]
    return shlex.join([*args, spec.image, "sweep", "--dir", folder_in_container(sweep_id)])


def inspect(box: Box, sweep_id: str) -> ContainerState | None:
    return inspect_named(box, container_name(sweep_id), sweep_id)


def existing_spec(box: Box, sweep_id: str) -> SweepSpec | None:
    """The spec of a sweep the box already has (a resume), or None."""
    text = box.read_text(f"{contract.sweep_dir(box.root, sweep_id)}/{SPEC_FILE}")
    if not text:
        return None
    return SweepSpec.from_json(text, f"{box.address}: sweep {sweep_id}'s {SPEC_FILE}")


def stored_spec(storage_uri: str, sweep_id: str) -> SweepSpec | None:
    """The spec of a sweep of this id in the stack's storage (its mirror), or None: a
    sweep that ran on a box since replaced, or an earlier sweep of the same id."""
    from trainer.storage import ObjectNotFound, open_store

    where = f"{storage_layout.sweep_uri(storage_uri, sweep_id)}/{SPEC_FILE}"
    try:
        text = open_store(storage_layout.sweep_uri(storage_uri, sweep_id)).read_bytes(SPEC_FILE)
    except ObjectNotFound:
        return None
    except Exception as error:  # storage down: whether the id is taken is unknown
        raise UserError(
            f"cannot read {where} ({type(error).__name__}: {error}); a sweep id must be "
            "checked against storage's sweeps: try again once storage answers"
        ) from None
    return SweepSpec.from_json(text.decode(errors="replace"), where)


def start(box: Box, spec: SweepSpec, *, gpus: bool, user: str) -> None:
    """(Re)create the driver's container; a stopped one of the same sweep is replaced,
    the user's stop marker removed once it is gone."""
    state = inspect(box, spec.sweep_id)
    if state is not None and (state.running or state.restarting):
        raise Exit(f"sweep {spec.sweep_id} is already running on {box.address}")
    folder = contract.sweep_dir(box.root, spec.sweep_id)
    box.run(f"mkdir -p {shlex.quote(folder)}")
    box.run_with_input(f"cat > {shlex.quote(folder)}/{SPEC_FILE}", spec.to_json())
    if box.target.container_env:
        env_files.write_env_file(box, env_file(box.root, spec.sweep_id), box.target.container_env)
    if state is not None:
        box.run(f"docker rm {shlex.quote(container_name(spec.sweep_id))}")
    box.run(f"rm -f {shlex.quote(folder)}/{contract.STOPPED_BY_USER}")
    box.run(docker_run_command(box, spec, gpus=gpus, user=user))


def stop(box: Box, sweep_id: str) -> str:
    """Mark the sweep stopped by the user (nothing resumes it), then `docker stop`: the
    driver stops its trials at a checkpoint. A sweep that exited 75 (stopped, evicted)
    waits for the resume unit: the mark alone keeps it down. What was done, in words."""
    state = inspect(box, sweep_id)
    waiting = state is not None and state.exit_code == contract.EXIT_STOPPED
    if state is None or not (state.running or state.restarting or waiting):
        raise Exit(f"sweep {sweep_id} is not running on {box.address}; nothing to stop")
    folder = shlex.quote(contract.sweep_dir(box.root, sweep_id))
    box.run(f"touch {folder}/{contract.STOPPED_BY_USER}")
    # Stopped even when it looked stopped: a resume unit that read no mark just before
    # it was written may have started the container since.
    name = shlex.quote(container_name(sweep_id))
    box.run(f"docker stop --time {contract.STOP_TIMEOUT_SECONDS} {name}")
    after = inspect(box, sweep_id)
    if not (state.running or state.restarting):
        return f"sweep {sweep_id} was waiting for its restart (exit 75); it stays down"
    return f"sweep {sweep_id} stopped (exit {after.exit_code if after else '?'})"
