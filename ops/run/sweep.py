"""What `fab sweep` does, step by step (`start_sweep`), and a sweep on the box: its
folder, its driver's container, its stop.

`start_sweep` reads a resumed sweep's spec (from the box, else from storage) or makes
a new one from the flags, then ships the image and the dataset as `fab train` does
(`ops.run.launch`), writes the spec to the box and starts the driver; from then on
the box runs the queue without this machine.

The driver (`python -m trainer sweep`) runs in the trainer image, in a container named
and labelled by the box contract (`glucose-sweep-<id>`), restart policy `no` like a
trainer's: the box's resume unit restarts it after an eviction or a nightly stop.
It mounts the sweep's folder, the box's whole `runs/` (its trials are runs, made as
it goes), and read-only the dataset and the box's boot and stop records; `containerEnv`
reaches it as a run's does, in a 0600 dot file of the sweep's folder (never mirrored).
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.data import transfer as storage_sync
from ops.image.shipping import ImageSource, image_on_boxes
from ops.remote import update as box_update
from ops.remote.ssh import Box
from ops.run import end_watch, env_files, launch, on_box
from ops.run.container import (
    BOX_RECORDS,
    WORKSPACE,
    container_options,
    volume_options,
    workspace_dataset,
)
from ops.run.names import checked_name
from ops.run.on_box import ContainerState, inspect_named
from ops.terminal_text import printable
from stack import storage_layout
from trainer.config import UserError, check_run_name, check_train_flags
from trainer.reports.cost import RECORDS_ENV
from trainer.sweep import space
from trainer.sweep.spec import SPEC_FILE, SweepSpec

RUNS_IN_CONTAINER = f"{WORKSPACE}/{contract.RUNS_DIR}"
DEFAULT_TRIALS = 8
SAID_CHARACTERS = 400
"""Of what a sweep's spec, the box's or storage's, holds that a line quotes."""
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class SweepFlags:
    """What `fab sweep` asked for; all left at their defaults, a resume."""

    dataset: str = ""
    param: tuple[str, ...] = ()
    trials: int = 0
    method: str = ""
    concurrent: int = 0
    prune: bool = False
    seed: int = 0
    trainer_args: tuple[str, ...] = ()
    name: str = ""


# The flags that make a sweep's spec: given to a resume, they would change the study.
_SPEC_FLAGS = ("dataset", "param", "trials", "method", "concurrent", "prune", "trainer_args")


def start_sweep(box: Box, sweep: str, flags: SweepFlags, image_source: ImageSource) -> SweepSpec:
    """`fab sweep`'s steps: the box's programs current enough to keep a sweep up, the
    spec (sweep `sweep`'s own, from the box or else storage, to resume it; else a new
    one from `flags`), the dataset in storage, then under a start-up lease the image and
    the dataset on the box and the driver started. The spec it runs."""
    stale = box_update.stale_warning(box)
    if stale:  # the box's watchdog and resume unit must know the sweep's container
        raise Exit(f"{stale}: a sweep needs box programs that keep it up and resume it")
    sweep_id = checked_name(sweep or time.strftime("sweep-%Y%m%d-%H%M%S"), "--sweep")
    try:
        existing = existing_spec(box, sweep_id) if sweep else None
        # Not on this box: a sweep of a box since replaced, or an earlier one of that id.
        stored = None if existing or not sweep else _stored(box, sweep_id)
    except UserError as error:  # about the spec the box or storage holds: their words
        raise Exit(printable(error, SAID_CHARACTERS)) from None
    running = existing and inspect(box, sweep_id)
    if running and (running.running or running.restarting):
        raise Exit(f"sweep {sweep_id} is already running on {box.address}; see `fab runs --sweep`")
    try:
        if existing or stored:
            spec = _resumed(existing or stored, flags, box.address if existing else "storage")
        else:
            spec = _spec(box, sweep_id, flags)
    except UserError as error:
        raise Exit(printable(error, SAID_CHARACTERS)) from None
    data_uri = storage_layout.dataset_uri(box.target.storage_uri, spec.dataset)
    storage_sync.require_dataset(data_uri, box.target.storage_uri)  # before any image work
    if box.target.node_count > 1:
        console.print(f"sweep {sweep_id}: on box 0 ({box.address}); the other boxes stay idle")
    lease, why = f"sweep-{sweep_id}", f"fab sweep --sweep {sweep_id}: starting"
    with launch.start_up_lease(box, lease, why):
        image = image_on_boxes([box], image_source)
        launch.fetch_dataset_on_boxes([box], image, data_uri)
        spec = dataclasses.replace(spec, image=image)
        start(box, spec, gpus=spec.gpus > 0, user=on_box.box_user(box))
        if end_watch.wanted(box):
            console.print(end_watch.start(box, container_name(sweep_id), f"sweep {sweep_id}"))
    return spec


def _spec(box: Box, sweep_id: str, flags: SweepFlags) -> SweepSpec:
    """A new sweep's spec from the flags; UserError naming the flag that is wrong."""
    if not flags.dataset:
        raise UserError("which dataset? pass --dataset NAME (see `fab upload-data`)")
    check_run_name(flags.name)
    check_train_flags(flags.trainer_args)  # each trial's, before anything ships
    params = space.parse_params(list(flags.param))
    method = flags.method or ("random" if any(p.is_range for p in params) else "grid")
    trials = flags.trials or (space.grid_size(params) if method == "grid" else DEFAULT_TRIALS)
    if method == "grid" and trials > space.grid_size(params):
        raise UserError(f"--trials {trials}: the grid has {space.grid_size(params)} points")
    gpus = on_box.box_gpu_count(box)
    dataset = checked_name(flags.dataset, "--dataset", "dataset name")
    return SweepSpec(
        sweep_id=sweep_id,
        dataset=dataset,
        data_dir=workspace_dataset(dataset),
        runs_dir=RUNS_IN_CONTAINER,
        storage_uri=box.target.storage_uri,
        params=[param.text() for param in params],
        method=method,
        trials=trials,
        concurrent=flags.concurrent or max(gpus, 1),
        gpus=gpus,
        prune=flags.prune,
        seed=flags.seed,
        trainer_args=list(flags.trainer_args),
        name=flags.name,
        hourly_price_usd=box.target.hourly_price_usd,
        spot=box.target.spot,
    )


def _stored(box: Box, sweep_id: str) -> SweepSpec | None:
    """Storage's spec of sweep `sweep_id`, for this box's image, price and GPUs."""
    stored = stored_spec(box.target.storage_uri, sweep_id)
    if stored is None:
        return None
    gpus = on_box.box_gpu_count(box)
    return dataclasses.replace(
        stored, gpus=gpus, hourly_price_usd=box.target.hourly_price_usd, spot=box.target.spot
    )


def _resumed(existing: SweepSpec, flags: SweepFlags, where: str) -> SweepSpec:
    """The spec this sweep was started with (on the box, else in storage); flags that
    would change it are refused: a sweep id names one study."""
    given = [f"--{name.replace('_', '-')}" for name in _SPEC_FLAGS if getattr(flags, name)]
    if given:
        raise Exit(
            f"--sweep {existing.sweep_id} names an earlier {printable(existing.described())} (in "
            f"{where}); a new sweep needs a new id (leave --sweep out for one), and "
            f"`fab sweep --sweep {existing.sweep_id}` alone, without {', '.join(given)}, "
            "resumes that one"
        )
    return existing


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
        *volume_options(
            f"{contract.sweep_dir(box.root, sweep_id)}:{folder_in_container(sweep_id)}",
            f"{box.root}/{contract.RUNS_DIR}:{RUNS_IN_CONTAINER}",
            f"{contract.dataset_dir(box.root, spec.dataset)}:{workspace_dataset(spec.dataset)}:ro",
            # The box's boot and stop records, as a run's container has them: each
            # trial's summary counts its share of the box's up time (trainer.reports.cost).
            f"{box.root}/{contract.WATCHDOG_DIR}:{BOX_RECORDS}:ro",
        ),
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


def stop_and_tell(box: Box, sweep_id: str) -> None:
    """`stop`, and what was done and how to resume, printed: `fab stop --run ID` and
    `fab sweep --stop --sweep ID` both."""
    with console.status(f"stopping sweep {sweep_id}: its trials checkpoint"):
        done = stop(box, sweep_id)
    print(f"{done}; resume: fab sweep --sweep {sweep_id}")
