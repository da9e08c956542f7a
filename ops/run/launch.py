"""What `fab train` does, step by step (`start_training`): the dataset checked in storage,
the run's deadline set, the boxes started when asked, leases held while the image
ships and the dataset is cached on every box, then the trainer started.

Each step is idempotent, so running `fab train --run ID` again after a stop (or a
failed start) picks up where the first call left off, and the trainer resumes from
its newest checkpoint at `--checkpoint-uri`; what the run was launched with (its
dataset, flags, image) comes from its launch record (`ops.run.relaunch`).

A box with G > 1 GPUs, or a stack of N > 1 boxes, runs one container per box with
torchrun over all G GPUs (`ops.run.distributed`), box 0 first: it serves the
rendezvous the others join. One GPU on one box runs `train` by itself, as always: no
extra process, no process group, the container's exit code the trainer's own.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.data import transfer as storage_sync
from ops.image.shipping import ImageSource, image_on_boxes
from ops.remote import lease as box_lease
from ops.remote import update as box_update
from ops.remote.boxes import nodes, start_boxes
from ops.remote.ssh import Box
from ops.run import container, deadline, end_watch, env_files, on_box
from ops.run.container import Launch
from ops.run.distributed import DistributedLaunch, fabric_of
from ops.run.names import checked_name
from ops.target.schema import Target
from ops.terminal_text import markup_safe
from stack import storage_layout
from stack.placement import price_table

# Written before the image is built and shipped, renewed before the dataset fetch.
START_UP_LEASE_MINUTES = 60
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class TrainRequest:
    """What `fab train` asked for, its flags checked."""

    data_uri: str
    run_id: str
    """The run to start or resume; "" a new one, named by the time it starts."""
    trainer_args: tuple[str, ...]
    name: str
    epochs: int
    hours: str
    """`--hours` as given ("" tonight's daily stop): `deadline.for_run` reads it."""
    allow_concurrent: bool
    start: bool
    """Start the stack's stopped boxes first."""


@dataclass(frozen=True)
class Started:
    """A run `start_training` started: what `fab train` tells the user of."""

    run_id: str
    box: Box
    """Box 0, rank 0's: where the run's log and status are."""


def start_training(where: Target, request: TrainRequest, image_source: ImageSource) -> Started:
    """`fab train`'s steps, each before the next can cost anything: the dataset in
    storage, the run's deadline, the boxes up and free, then under start-up leases
    the image on every box, the dataset cached there, the trainer started (box 0
    first) and, where no box program tells a run's end, the end watch beside it."""
    storage_sync.require_dataset(request.data_uri, where.storage_uri)  # before box or image
    until = deadline.for_run(where, request.data_uri, request.epochs, request.hours, _warn)
    if request.start:
        start_boxes(where, console.print)
    boxes = nodes(where)
    for each in boxes:
        box_update.warn_if_behind(each)
    run_id = request.run_id or time.strftime("%Y%m%d-%H%M%S")
    _refuse_busy_boxes(boxes, run_id, request.allow_concurrent)
    if until is not None:
        deadline.hold(where, until, _warn)
        now = datetime.datetime.now(datetime.timezone.utc)
        console.print(f"hard stop: {until.line(now)}")
    with start_up_leases(boxes, run_id) as renew_leases:
        image = image_on_boxes(boxes, image_source)
        renew_leases()
        dataset_name = fetch_dataset_on_boxes(boxes, image, request.data_uri)
        stop_at = until.until.timestamp() if until else None
        launch = Launch(
            run_id, image, dataset_name, request.trainer_args, deadline=stop_at,
            name=request.name, data_uri=request.data_uri,
        )  # fmt: skip
        start_run(boxes, launch)
        if end_watch.wanted(boxes[0]):
            told = end_watch.start(boxes[0], on_box.container_name(run_id), f"run {run_id}")
            console.print(told)
    return Started(run_id, boxes[0])


def _refuse_busy_boxes(boxes: list[Box], run_id: str, allow_concurrent: bool) -> None:
    """Exit when a box is busy with another run (unless shared on purpose), or this run
    is running already."""
    for each in boxes:
        busy = busy_runs(each, run_id)
        if busy and not allow_concurrent:
            raise Exit(
                f"{each.address} is busy with run {busy[0]}; `fab stop --run {busy[0]}` "
                "first, or pass --allow-concurrent to share it"
            )
    refuse_if_running(boxes, run_id)


def _warn(line: str) -> None:
    console.print(f"warning: {line}", highlight=False)


@contextlib.contextmanager
def start_up_lease(box: Box, name: str, reason: str) -> Iterator[Callable[[], None]]:
    """Keep the idle watchdog off while `fab train` or `fab sweep` prepares the box;
    yields `renew`.

    An image pull or a dataset fetch is no trainer, no GPU work and no SSH terminal,
    so without it a box idle for most of its limit stops mid-pull. Released when the
    trainer runs (its own start grace takes over) or start-up fails; a `fab` that
    dies leaves a lease that expires by itself.
    """

    def renew() -> None:
        box_lease.write(box, name, START_UP_LEASE_MINUTES, reason)

    renew()
    try:
        yield renew
    finally:
        with contextlib.suppress(Exception):  # a lost box cannot be told; it expires anyway
            box_lease.release(box, name)


@contextlib.contextmanager
def start_up_leases(boxes: list[Box], run_id: str) -> Iterator[Callable[[], None]]:
    """`start_up_lease` of the run on every box (a box waiting for box 0's image is no
    idler either); yields `renew`, which renews them all."""
    name, reason = f"train-{run_id}", f"fab train --run {run_id}: starting"
    with contextlib.ExitStack() as leases:
        renewals = [leases.enter_context(start_up_lease(box, name, reason)) for box in boxes]

        def renew() -> None:
            for renewal in renewals:
                renewal()

        yield renew


def dataset_name_from_uri(data_uri: str) -> str:
    name = data_uri.rstrip("/").rsplit("/", 1)[-1]
    return checked_name(name, f"--data-uri {data_uri}: its last path part", "dataset name")


def fetch_dataset_on_box(box: Box, image: str, data_uri: str, user: str) -> str:
    """Cache the dataset under BOX_ROOT/datasets/<name>, verified by its manifest."""
    name = dataset_name_from_uri(data_uri)
    host_dir = contract.dataset_dir(box.root, name)
    inside = container.workspace_dataset(name)
    box.run(f"mkdir -p {shlex.quote(host_dir)}")
    with console.status(f"{box.address} fetching dataset {data_uri}"):
        line = container.run_once(
            box,
            image,
            user,
            f"{host_dir}:{inside}",
            ["dataset-fetch", data_uri, inside],
            f"fetch-{name}",
        )
    console.print(markup_safe(line))  # the container's last line: the box's words
    return name


def fetch_dataset_on_boxes(boxes: list[Box], image: str, data_uri: str) -> str:
    """The dataset cached on every box (every rank reads it); its name."""
    names = {fetch_dataset_on_box(box, image, data_uri, on_box.box_user(box)) for box in boxes}
    return names.pop()


def start_run(boxes: list[Box], launch: Launch) -> None:
    """The run's container on every box, box 0 first (it serves the rendezvous); on
    several GPUs or boxes each runs torchrun over its box's GPUs."""
    gpus = on_box.box_gpu_count(boxes[0])  # the boxes of a stack are alike
    plans = [distributed_plan(box.target, launch.run_id, gpus, box.node) for box in boxes]
    if plans[0] is not None:
        console.print(
            f"run {launch.run_id}: {plans[0].boxes} box(es) x {plans[0].gpus_per_box} "
            f"rank(s) (world size {plans[0].world_size}), rank 0 on {boxes[0].address}"
        )
    for box, plan in zip(boxes, plans, strict=True):
        start_trainer(box, replace(launch, distributed=plan), on_box.box_user(box), gpus)


def busy_runs(box: Box, run_id: str) -> list[str]:
    return [other for other in on_box.run_ids(box, running_only=True) if other != run_id]


def distributed_plan(
    target: Target, run_id: str, gpus_per_box: int, node: int
) -> DistributedLaunch | None:
    """Box `node`'s part of a run over every GPU of every box; None for one GPU on one
    box (plain `train`)."""
    boxes = target.node_count
    if boxes == 1 and gpus_per_box <= 1:
        return None
    addresses = tuple(target.private_address(k) for k in range(boxes)) if boxes > 1 else ()
    if target.docker_network not in ("", "host") and boxes > 1:
        raise Exit(
            f"{target.source}: dockerNetwork {target.docker_network!r}: a run over "
            f"{boxes} boxes needs the boxes' own network (host); drop dockerNetwork"
        )
    try:
        fabric = fabric_of(target.vm_size, target.cloud)
        return DistributedLaunch(run_id, max(gpus_per_box, 1), addresses, node, fabric=fabric)
    except ValueError as error:
        raise Exit(
            f"{target.source}: {error}; list every box's private address in privateHosts "
            "(`pulumi up` exports it)"
        ) from None


def refuse_if_running(boxes: list[Box], run_id: str) -> None:
    """Exit when any box still runs this run: a start must begin on every box together."""
    for box in boxes:
        state = on_box.inspect_container(box, run_id)
        if state is not None and (state.running or state.restarting):
            raise Exit(f"run {run_id} is already running on {box.address}; see `fab status`")


def write_launch_record(box: Box, launch: Launch) -> None:
    """BOX_ROOT/runs/<id>/launch.json: first start time (for cost), what was launched, and
    this start's deadline (the box's resume unit starts nothing after it)."""
    path = f"{contract.run_dir(box.root, launch.run_id)}/{contract.LAUNCH_FILE}"
    plan = launch.distributed
    this_start = contract.LaunchRecord(
        run_id=launch.run_id,
        name=launch.name,
        image=launch.image,
        dataset=launch.dataset_name,
        data_uri=launch.data_uri or None,
        trainer_args=list(launch.trainer_args),
        started_at=time.time(),
        hourly_price_usd=box.target.hourly_price_usd,
        # Each boot is priced at the size it booted on (trainer/reports/cost.py).
        hourly_prices_usd=price_table(
            box.target.cloud,
            [box.target.vm_size, *(t["size"] for t in box.target.placement_tried)],
        ),
        spot=box.target.spot,
        boxes=plan.boxes if plan else 1,
        world_size=plan.world_size if plan else 1,
    )
    # A resume keeps the first launch's record (and so its start time) as its record
    # reads it: a key the box's file holds with another type (a NaN, a list where a
    # number goes) or does not hold is this start's, a key no record has is left out.
    # The deadline, the flags and the image are this start's: the next `fab train --run
    # ID` resumes them.
    first = contract.LaunchRecord.parse(box.read_text(path)).to_json()
    record = replace(this_start, **first).to_json()
    record[contract.LAUNCH_DEADLINE] = launch.deadline
    record.update(run_id=launch.run_id, trainer_args=list(launch.trainer_args), image=launch.image)
    box.run_with_input(f"cat > {shlex.quote(path)}", json.dumps(record))
    store_launch_record(box.target.storage_uri, launch.run_id, record)


def store_launch_record(storage_uri: str, run_id: str, record: dict) -> None:
    """The launch record in the run's folder in storage too, before the container starts:
    `fab runs` and `fab tensorboard` list the run from its first second (`launched`),
    also one that dies before the trainer's first upload. Storage that refuses it is a
    warning: the trainer's own mirror brings the record later."""
    from trainer.storage import open_store

    try:
        store = open_store(storage_layout.run_uri(storage_uri, run_id))
        store.write_bytes(contract.LAUNCH_FILE, json.dumps(record).encode())
    except Exception as error:  # the run can start without it
        console.print(
            f"[yellow]warning:[/] run {run_id}'s launch record did not reach {storage_uri} "
            f"({type(error).__name__}: {error}); `fab runs` lists it after its first upload"
        )


def start_trainer(box: Box, launch: Launch, user: str, gpus: int) -> None:
    """(Re)create the run's container; a stopped one of the same run is replaced."""
    state = on_box.inspect_container(box, launch.run_id)
    name = on_box.container_name(launch.run_id)
    if state is not None and (state.running or state.restarting):
        raise Exit(f"run {launch.run_id} is already running on {box.address}; see `fab status`")
    run_dir = contract.run_dir(box.root, launch.run_id)
    box.run(f"mkdir -p {shlex.quote(run_dir)}")
    # Rank 0's is the run's record for `fab status`; every box's resume unit reads its own.
    write_launch_record(box, launch)
    if box.target.container_env:
        env_file = env_files.run_env_file(box.root, launch.run_id)
        env_files.write_env_file(box, env_file, box.target.container_env)
    if state is not None:
        box.run(f"docker rm {shlex.quote(name)}")
    # Only with the old container gone: the box's resume unit must never find a
    # user-stopped container without its marker.
    box.run(f"rm -f {shlex.quote(run_dir)}/{contract.STOPPED_BY_USER}")
    box.run(container.docker_run_command(box.target, launch, gpus=gpus > 0, user=user))
