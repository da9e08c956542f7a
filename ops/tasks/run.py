"""Start a training run on the box, follow it, and stop it gracefully.

What `fab train` runs on the box, step by step, is `ops.run.launch.start_training`;
this module reads the flags and tells the user what happened."""

from __future__ import annotations

import json as jsonlib
import time

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.cloud import api as cloud
from ops.image.shipping import ImageSource
from ops.remote import lease as box_lease
from ops.remote.boxes import AnyBox, box_for, nodes, start_boxes
from ops.run import deadline, ids, launch, look, on_box, relaunch
from ops.run import logs as run_logs
from ops.run import stop as run_stop
from ops.run import sweep as on_box_sweep
from ops.run.names import checked_name
from ops.target.guard_rails import none_note
from ops.target.resolve import resolve_target
from ops.tasks.flags import (
    BUILD_HELP,
    IMAGE_HELP,
    STACK_HELP,
    TARGET_HELP,
    positive_seconds,
    task,
    trainer_flags,
)
from stack import storage_layout
from trainer.config import UserError, check_run_name, check_train_flags
from trainer.quantities import COUNT_FORMS, duration_forms, flag_problem, parse_count

console = Console(stderr=True, soft_wrap=True)
RUN_HELP = "run id (default: the newest run on the box)"


def _box(target: str, stack: str, node: int = 0) -> AnyBox:
    """Box `node` of the target (box 0, rank 0's, unless said)."""
    return box_for(resolve_target(target or None, stack or None), node)


def _boxes(target: str, stack: str, others_wait_s: float | None = None) -> list[AnyBox]:
    """Every box of the target, box 0 first."""
    return nodes(resolve_target(target or None, stack or None), others_wait_s)


def _trainer_args(epochs: int, max_steps: int, trainer_args: str, name: str) -> tuple[str, ...]:
    args = []
    if epochs:
        args += ["--epochs", str(epochs)]
    if max_steps:
        args += ["--max-steps", str(max_steps)]
    if name:
        args += ["--name", name]
    return (*args, *trainer_flags(trainer_args))


@task(
    iterable=["build_arg"],
    help={
        "data-uri": "dataset in storage, e.g. <storageUri>/datasets/NAME (see upload-data)",
        "dataset": "short for --data-uri <storageUri>/datasets/DATASET",
        "run": "run id; a launched one resumes as launched (its dataset, flags, image, boxes) "
        "from its newest checkpoint (default: a new id)",
        "epochs": "epochs (default: the trainer's)",
        "max-steps": "stop after this many steps (default: no limit)",
        "trainer-args": "more `python -m trainer train` flags, quoted as one string",
        "allow-concurrent": "start even though another run is busy on the box",
        "hours": "the run's deadline, this long from now (at most the stack's maxRunHours): "
        "past the daily stop, the cloud's hard stop moves there; `auto`: fab plan's "
        f"estimate with room. Default: tonight's daily stop. {duration_forms('h').capitalize()}",
        "start": "start the stack's stopped boxes first (`fab start`)",
        "name": f"a label for the run, kept in {contract.LAUNCH_FILE}, {contract.CONFIG_FILE} "
        f"and {contract.SUMMARY_FILE}",
        **BUILD_HELP,
        "image-name": IMAGE_HELP,
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def train(
    c,
    data_uri="",
    dataset="",
    run="",
    epochs=0,
    max_steps=0,
    trainer_args="",
    allow_concurrent=False,
    hours="",
    start=False,
    name="",
    base_image="",
    build_arg=None,
    extra_ca="",
    image_name="",
    target="",
    stack="",
):
    """Ship the image and start (or resume) a run on the box (every box of the stack)."""
    args = _trainer_args(epochs, max_steps, trainer_args, name)  # bad quotes: before any box
    deadline.parse_hours(str(hours or ""))  # as every flag: before the target and the dataset
    try:
        check_run_name(name)
        check_train_flags(args)  # the trainer's own parser, before anything ships
    except UserError as error:
        raise Exit(str(error)) from None
    where = resolve_target(target or None, stack or None)
    image = ImageSource(image_name, base_image, tuple(build_arg or ()), extra_ca)
    given = relaunch.Given(data_uri, dataset, args, name, image)
    resumed = relaunch.for_run(where, checked_name(run, "--run"), given) if run else None
    if resumed:  # as launched: its dataset, flags, name and image
        data_uri, args, name, image = (
            resumed.data_uri, resumed.trainer_args, resumed.name, resumed.image
        )  # fmt: skip
        epochs = epochs or resumed.epochs
    elif not (data_uri or dataset):
        raise Exit(relaunch.which_dataset(run))
    data_uri = data_uri or storage_layout.dataset_uri(where.storage_uri, dataset)
    request = launch.TrainRequest(
        data_uri, run, args, name, epochs, str(hours or ""), allow_concurrent, start
    )
    started = launch.start_training(where, request, image)
    run_id, box = started.run_id, started.box
    print(run_id)
    console.print(
        f"run {run_id} started on {box.address}; checkpoints go to "
        f"{storage_layout.run_uri(box.target.storage_uri, run_id)}\n"
        f"  follow:  fab logs --follow --run {run_id}\n"
        f"  status:  fab status --run {run_id}\n"
        f"  stop:    fab stop --run {run_id}   (resume: fab train --run {run_id})"
    )
    if note := none_note(box.target):
        console.print(f"guard rails: {note}")


@task(
    help={
        "run": f"{RUN_HELP}; a sweep's id: its driver's log",
        "follow": "keep printing new lines until the run ends (Ctrl-C leaves it running); "
        "what no container holds is shown, then refused (exit 1)",
        "tail": "lines of history to show first (default: all)",
        "node": "which box of a multi-node stack (default: 0, rank 0's: the run's log)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def logs(c, run="", follow=False, tail="all", node=0, target="", stack=""):
    """Print the log of a run, a sweep's trial or a sweep (--follow to keep watching)."""
    tail = _tail_lines(tail)
    box = _box(target, stack, int(node))
    run_id = on_box.resolve_run_id(box, run)
    run_logs.show(box, ids.named(box, run_id) if run else ids.Named(run_id), tail, follow)


def _tail_lines(text: object) -> str:
    """--tail as `docker logs` takes it: `all`, or a count in the one grammar."""
    if str(text).strip().lower() == "all":
        return "all"
    try:
        lines = parse_count(str(text))
    except ValueError:
        lines = -1
    if lines < 0:
        expected = f"all, or {COUNT_FORMS} (lines)"
        raise Exit("fab logs: " + flag_problem("--tail", text, expected, "100"))
    return str(lines)


@task(
    durations={"every": "s"},
    help={
        "run": RUN_HELP,
        "start": "start the stack's stopped boxes first (`fab start`), then look",
        "watch": "look again after each --every, in place, until Ctrl-C",
        "every": "time between looks with --watch (default 10 s)",
        "json": "print one JSON object: the boxes' power, the run, its cost",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def status(c, run="", start=False, watch=False, every=10.0, json=False, target="", stack=""):
    """Show a run's state, progress, cost, and the box's power and idle guard."""
    every_s = positive_seconds("--every", every) if watch else None
    where = resolve_target(target or None, stack or None)
    if note := none_note(where):
        console.print(f"guard rails: {note}")
    if start:
        start_boxes(where, console.print)
    if watch:
        look.watch(lambda: look.look(where, run), every_s)
        return
    view = look.look(where, run)
    print(jsonlib.dumps(view.to_json(), indent=2) if json else view.render())


@task(
    positional=["duration"],
    help={
        "duration": f"how long: 2h, 90m, 1h30m or a bare number of hours (at most "
        f"{contract.MAX_LEASE_MINUTES // 60}h); 0 ends a hold",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def hold(c, duration, target="", stack=""):
    """Keep the box up without an SSH terminal: `fab hold 2h` (every box of the stack)."""
    minutes = box_lease.parse_minutes(duration)
    boxes = _boxes(target, stack)
    if boxes[0].target.this_machine:
        raise Exit(
            f"{boxes[0].target.source} is this machine: no idle watchdog stops it, so there "
            "is nothing to hold it up against; no hold needed"
        )
    for box in boxes:
        if minutes == 0:
            box_lease.release(box, contract.HOLD_LEASE)
            print(f"hold on {box.address} ended; the idle watchdog counts from its next look")
            continue
        until = box_lease.write(box, contract.HOLD_LEASE, minutes, f"fab hold {duration}")
        if until is None:
            raise Exit(f"could not hold {box.address}: see the warning above")
        print(
            f"{box.address} held up until {time.strftime('%H:%M', time.localtime(until))} "
            "(the idle watchdog counts from then; `fab hold 0` ends it sooner)"
        )


@task(
    help={
        "run": f"{RUN_HELP}; a sweep's id, or a trial's: the sweep",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def stop(c, run="", target="", stack=""):
    """Stop a run or a sweep gracefully: checkpoint, upload, exit; it stays down."""
    boxes = _boxes(target, stack, look.OTHER_BOX_WAIT_SECONDS)
    run_id = on_box.resolve_run_id(boxes[0], run)
    try:
        named = ids.named(boxes[0], run_id) if run else ids.Named(run_id)
    except Exit:  # box 0 does not answer: `stop_run` says the stop is not recorded
        named = ids.Named(run_id)
    if named.sweep_id:  # a trial trains in its sweep's container: the sweep stops
        if named.trial_of:
            console.print(f"{named.trial_line()}: stopping the sweep (each trial checkpoints)")
        on_box_sweep.stop_and_tell(boxes[0], named.sweep_id)
        return
    stops = run_stop.stop_run(boxes, run_id)
    run_stop.tell(stops, run_id, storage_layout.run_uri(boxes[0].target.storage_uri, run_id))
    where = boxes[0].target
    # Its deadline ends with it, unless another run on the boxes still counts on it.
    if where.daily_stop_schedules and not launch.busy_runs(boxes[0], run_id):
        cloud.clear_deadline(where)
        console.print("hard stop: the daily stop again, as the stack declares it")
