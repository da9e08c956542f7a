"""`fab sweep`: a search over trainer flags that runs on the box without this machine.

This ships the image and the dataset as `fab train` does, writes the sweep's spec to
the box and starts its driver (`ops.run.sweep`); from then on the box runs the queue,
stops it at checkpoints when the box is stopped, and the resume unit brings it back.
`fab runs --sweep ID` ranks the trials, from storage, whether the box is up or not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.data import transfer as storage_sync
from ops.image.shipping import image_on_boxes
from ops.remote import lease as box_lease
from ops.remote import update as box_update
from ops.remote.boxes import AnyBox, box_for
from ops.run import end_watch, launch, on_box
from ops.run import sweep as on_box_sweep
from ops.run.names import checked_name
from ops.target.resolve import resolve_target
from ops.tasks.flags import (
    BUILD_HELP,
    IMAGE_HELP,
    STACK_HELP,
    TARGET_HELP,
    task,
    trainer_flags,
)
from stack import storage_layout
from trainer.config import UserError, check_run_name, check_train_flags
from trainer.sweep import space
from trainer.sweep.spec import SweepSpec

console = Console(stderr=True, soft_wrap=True)
DEFAULT_TRIALS = 8
START_UP_LEASE_MINUTES = 60


def _spec(box: AnyBox, sweep_id: str, flags: dict) -> SweepSpec:
    """A new sweep's spec from the flags; UserError naming the flag that is wrong."""
    if not flags["dataset"]:
        raise UserError("which dataset? pass --dataset NAME (see `fab upload-data`)")
    check_run_name(flags["name"])
    check_train_flags(flags["trainer_args"])  # each trial's, before anything ships
    params = space.parse_params(flags["param"])
    method = flags["method"] or ("random" if any(p.is_range for p in params) else "grid")
    trials = flags["trials"] or (space.grid_size(params) if method == "grid" else DEFAULT_TRIALS)
    if method == "grid" and trials > space.grid_size(params):
        raise UserError(f"--trials {trials}: the grid has {space.grid_size(params)} points")
    gpus = on_box.box_gpu_count(box)
    dataset = checked_name(flags["dataset"], "--dataset", "dataset name")
    return SweepSpec(
        sweep_id=sweep_id,
        dataset=dataset,
        data_dir=f"/workspace/{contract.DATASETS_DIR}/{dataset}",
        runs_dir=on_box_sweep.RUNS_IN_CONTAINER,
        storage_uri=box.target.storage_uri,
        params=[param.text() for param in params],
        method=method,
        trials=trials,
        concurrent=flags["concurrent"] or max(gpus, 1),
        gpus=gpus,
        prune=flags["prune"],
        seed=flags["seed"],
        trainer_args=flags["trainer_args"],
        name=flags["name"],
        hourly_price_usd=box.target.hourly_price_usd,
        spot=box.target.spot,
    )


def _stored(box: AnyBox, sweep_id: str) -> SweepSpec | None:
    """Storage's spec of sweep `sweep_id`, for this box's image, price and GPUs."""
    stored = on_box_sweep.stored_spec(box.target.storage_uri, sweep_id)
    if stored is None:
        return None
    gpus = on_box.box_gpu_count(box)
    return dataclasses.replace(
        stored, gpus=gpus, hourly_price_usd=box.target.hourly_price_usd, spot=box.target.spot
    )


def _resumed(existing: SweepSpec, flags: dict, where: str) -> SweepSpec:
    """The spec this sweep was started with (on the box, else in storage); flags that
    would change it are refused: a sweep id names one study."""
    given = [f"--{name.replace('_', '-')}" for name in _SPEC_FLAGS if flags[name]]
    if given:
        raise Exit(
            f"--sweep {existing.sweep_id} names an earlier {existing.described()} (in "
            f"{where}); a new sweep needs a new id (leave --sweep out for one), and "
            f"`fab sweep --sweep {existing.sweep_id}` alone, without {', '.join(given)}, "
            "resumes that one"
        )
    return existing


_SPEC_FLAGS = ("dataset", "param", "trials", "method", "concurrent", "prune", "trainer_args")


@contextlib.contextmanager
def _start_up_lease(box: AnyBox, sweep_id: str):
    """The idle watchdog stays off while the image and the dataset travel."""
    name = f"sweep-{sweep_id}"
    box_lease.write(box, name, START_UP_LEASE_MINUTES, f"fab sweep --sweep {sweep_id}: starting")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a lost box cannot be told; it expires anyway
            box_lease.release(box, name)


@task(
    iterable=["param", "build_arg"],
    help={
        "dataset": "dataset in the stack's storage (see upload-data)",
        "param": "a flag to vary: NAME=A,B,C (listed) or NAME=LOW:HIGH[:log] (a range); "
        f"repeatable; NAME one of {', '.join(space.TUNABLE)}",
        "trials": f"how many (default: the grid's size, else {DEFAULT_TRIALS})",
        "method": "grid, random or tpe (default: grid when every --param is listed, else random)",
        "concurrent": "trials at once (default: one per GPU, 1 on a CPU box); more than the "
        "GPUs share them",
        "prune": "stop a trial whose validation MAE lags the others' median at the same epoch",
        "seed": "the sampler's seed",
        "trainer-args": "`python -m trainer train` flags every trial gets, quoted as one string",
        "name": "a label for the sweep",
        "sweep": "sweep id (default: a new one); an existing one resumes where it stopped",
        "stop": "stop the sweep --sweep ID: its trials checkpoint; nothing resumes it",
        **BUILD_HELP,
        "image-name": IMAGE_HELP,
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def sweep(
    c,
    dataset="",
    param=None,
    trials=0,
    method="",
    concurrent=0,
    prune=False,
    seed=0,
    trainer_args="",
    name="",
    sweep="",
    stop=False,
    base_image="",
    build_arg=None,
    extra_ca="",
    image_name="",
    target="",
    stack="",
):
    """Search trainer flags with trials on the box, which runs the sweep by itself."""
    split_trainer_args = trainer_flags(trainer_args)  # an unbalanced quote: before any box
    box = box_for(resolve_target(target or None, stack or None))
    if stop:
        if not sweep:
            raise Exit("which sweep? pass --stop --sweep ID (`fab runs` lists sweeps' trials)")
        sweep_id = checked_name(sweep, "--sweep")
        with console.status(f"stopping sweep {sweep_id}: its trials checkpoint"):
            done = on_box_sweep.stop(box, sweep_id)
        print(f"{done}; resume: fab sweep --sweep {sweep_id}")
        return
    stale = box_update.stale_warning(box)
    if stale:  # the box's watchdog and resume unit must know the sweep's container
        raise Exit(f"{stale}: a sweep needs box programs that keep it up and resume it")
    sweep_id = checked_name(sweep or time.strftime("sweep-%Y%m%d-%H%M%S"), "--sweep")
    flags = dict(
        dataset=dataset, param=param or [], trials=int(trials), method=method,
        concurrent=int(concurrent), prune=prune, seed=int(seed),
        trainer_args=split_trainer_args,
        name=name,
    )  # fmt: skip
    try:
        existing = on_box_sweep.existing_spec(box, sweep_id) if sweep else None
        # Not on this box: a sweep of a box since replaced, or an earlier one of that id.
        stored = None if existing or not sweep else _stored(box, sweep_id)
    except UserError as error:
        raise Exit(str(error)) from None
    running = existing and on_box_sweep.inspect(box, sweep_id)
    if running and (running.running or running.restarting):
        raise Exit(f"sweep {sweep_id} is already running on {box.address}; see `fab runs --sweep`")
    try:
        if existing or stored:
            spec = _resumed(existing or stored, flags, box.address if existing else "storage")
        else:
            spec = _spec(box, sweep_id, flags)
    except UserError as error:
        raise Exit(str(error)) from None
    data_uri = storage_layout.dataset_uri(box.target.storage_uri, spec.dataset)
    storage_sync.require_dataset(data_uri, box.target.storage_uri)  # before any image work
    if box.target.node_count > 1:
        console.print(f"sweep {sweep_id}: on box 0 ({box.address}); the other boxes stay idle")
    with _start_up_lease(box, sweep_id):
        image = image_on_boxes([box], image_name, base_image, build_arg or [], extra_ca)
        launch.fetch_dataset_on_boxes([box], image, data_uri)
        spec = dataclasses.replace(spec, image=image)
        on_box_sweep.start(box, spec, gpus=spec.gpus > 0, user=on_box.box_user(box))
        if end_watch.wanted(box):
            name = on_box_sweep.container_name(sweep_id)
            console.print(end_watch.start(box, name, f"sweep {sweep_id}"))
    print(sweep_id)
    console.print(
        f"sweep {sweep_id} started on {box.address}: {spec.trials} trials of "
        f"{', '.join(spec.params)} ({spec.method}, {spec.concurrent} at a time); the box "
        "runs it without this machine\n"
        f"  trials:  fab runs --sweep {sweep_id}\n"
        f"  stop:    fab sweep --stop --sweep {sweep_id}   (resume: fab sweep --sweep {sweep_id})"
    )
