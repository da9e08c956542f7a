"""`fab stop`: the user's stop recorded on every box that holds the run, then its trainer
containers stopped gracefully (box 0's first: its stop ends every rank).

The record (`runs/<id>/STOPPED_BY_USER`) is what keeps a box's resume unit from starting
the run again, so it is written whether the run is running or not: a run that exited 75
(stopped or preempted, its restart due within a minute) or one killed with its box (an
eviction) would otherwise start again by itself. Records first, then the stops: a resume
unit that looks in between already finds the record. A sweep's id, or a trial's (it has
no container of its own: it trains in the sweep's), stops the sweep (`ops.run.sweep.stop`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.remote.ssh import Box
from ops.run import on_box
from ops.run.on_box import ContainerState

console = Console(stderr=True, soft_wrap=True)


@dataclass
class BoxStop:
    """One box's part in a stop: what was found there and what was done."""

    box: Box
    container: ContainerState | None = None
    """The run's container as the stop found it; None when the box has none."""
    holds_run: bool = False
    """The run's container or run dir is on this box."""
    already_marked: bool = False
    """`fab stop` had recorded the user's stop here before."""
    not_marked: str = ""
    """Why the stop is not recorded here ("" when it is, or the box holds no run)."""
    exit_code: int | None = None
    """The container's exit code once stopped (None: no container)."""

    @property
    def marked(self) -> bool:
        return self.holds_run and not self.not_marked

    @property
    def was_running(self) -> bool:
        return self.container is not None and (self.container.running or self.container.restarting)


def stop_run(boxes: list[Box], run_id: str) -> list[BoxStop]:
    """Record the user's stop of `run_id` on every box holding it, then stop its
    containers. Exit, with nothing stopped, when box 0 cannot be asked or marked (the
    other boxes are reached through it) or when no box holds the run."""
    first = _look(boxes[0], run_id)
    if first.not_marked:
        raise Exit(_not_recorded(run_id, boxes, first.not_marked))
    stops = [first, *(_look(box, run_id) for box in boxes[1:])]
    if not any(stop.holds_run for stop in stops):
        raise Exit(
            f"no run {run_id} on {boxes[0].address} (no container, no run dir); nothing to "
            "stop; `fab status` names the box's newest run"
        )
    for stop in stops:
        if stop.holds_run and not stop.not_marked:
            stop.not_marked = _mark(stop.box, run_id)
            if stop is first and first.not_marked:  # before any other box is marked
                raise Exit(_not_recorded(run_id, boxes, first.not_marked))
    grace = contract.STOP_TIMEOUT_SECONDS
    name = shlex.quote(on_box.container_name(run_id))
    with console.status(f"stopping {run_id}: checkpoint + upload (<= {grace} s)"):
        for stop in stops:
            # Stopped even when it looked stopped: a resume unit that read no record just
            # before it was written may have started the container since.
            if stop.marked and stop.container is not None:
                stop.box.run(f"docker stop --time {grace} {name}")
                after = on_box.inspect_container(stop.box, run_id)
                stop.exit_code = after.exit_code if after else None
    return stops


def _look(box: Box, run_id: str) -> BoxStop:
    run_dir = contract.run_dir(box.root, run_id)
    try:
        container = on_box.inspect_container(box, run_id)
        holds_run = container is not None or box.exists(run_dir)
        already = holds_run and box.exists(f"{run_dir}/{contract.STOPPED_BY_USER}")
    except Exit as error:  # the box does not answer: it cannot be marked
        return BoxStop(box, not_marked=f"unreachable: {error.message}")
    return BoxStop(box, container, holds_run, already)


def _mark(box: Box, run_id: str) -> str:
    """Write the record on `box`; "" when done, else why not."""
    run_dir = shlex.quote(contract.run_dir(box.root, run_id))
    try:
        box.run(f"mkdir -p {run_dir} && touch {run_dir}/{contract.STOPPED_BY_USER}")
    except Exit as error:
        return f"the record could not be written: {error.message}"
    return ""


def _not_recorded(run_id: str, boxes: list[Box], why: str) -> str:
    behind = f" nor on boxes 1-{len(boxes) - 1}" if len(boxes) > 1 else ""
    return (
        f"the stop of run {run_id} is NOT recorded on box 0{behind} ({why}); nothing was "
        "stopped: once the box is back its resume unit may start the run again, so "
        f"`fab stop --run {run_id}` again as soon as `fab status` answers"
    )


def _recorded(stops: list[BoxStop], run_id: str) -> str:
    """Where the stop is recorded and what keeps the run down: the box's resume unit on
    a box `pulumi up` made; on this machine and a lab box nothing restarts a run."""
    box = stops[0].box
    resumes = f"`fab train --run {run_id}` resumes it"
    if box.target.this_machine:
        where = contract.run_dir(box.root, run_id)
        return f"stop recorded in {where}: run {run_id} stays down until {resumes}"
    marked = ", ".join(f"box {each.box.node} ({each.box.address})" for each in stops if each.marked)
    if not box.target.set_up_by_cloud_init:
        return f"stop recorded on {marked}: run {run_id} stays down until {resumes}"
    return f"stop recorded on {marked}: the boxes' resume unit leaves run {run_id} down; {resumes}"


def tell(stops: list[BoxStop], run_id: str, run_uri: str) -> None:
    """How the run stood, its checkpoint, which boxes got the record and which did not."""
    checkpoint = _latest_checkpoint(run_uri)
    running = [each for each in stops if each.was_running]
    if running:
        print(f"run {run_id} stopped (exit {running[0].exit_code}); checkpoint: {checkpoint}")
    else:
        before = _state_before(next(each for each in stops if each.holds_run))
        print(f"run {run_id} was not running ({before}); it stays down; checkpoint: {checkpoint}")
    console.print(_recorded(stops, run_id))
    for each in stops:
        if each.not_marked:
            console.print(
                f"[yellow]warning:[/] box {each.box.node}: stop NOT recorded ({each.not_marked}); "
                f"its part of the run ends with box 0's, but unmarked: if it starts again, "
                f"`fab stop --run {run_id}` once it is up"
            )
        elif each.was_running and each.exit_code not in (0, contract.EXIT_STOPPED):
            console.print(
                f"[yellow]warning:[/] exit {each.exit_code} on {each.box.address} is no "
                f"checkpointed stop; `fab logs --node {each.box.node}`"
            )
    console.print(f"resume: fab train --run {run_id}   results: fab download --run {run_id}")


def _state_before(stop: BoxStop) -> str:
    """How the run stood on `stop`'s box when it was not running."""
    if stop.already_marked:
        return "already stopped by `fab stop`"
    if stop.container is None:
        return "no container"
    code = stop.container.exit_code
    if code == contract.EXIT_STOPPED:
        return f"exited {code}, checkpointed: the box's resume unit would have started it again"
    return contract.STATE_FINISHED if code == contract.EXIT_FINISHED else f"exited {code}"


def _latest_checkpoint(run_uri: str) -> str:
    """The URI of the newest complete checkpoint, as the trainer's LATEST pointer names it."""
    from trainer.checkpoints import layout
    from trainer.storage import open_store

    try:
        name = layout.read_pointer(open_store(run_uri), layout.LATEST_KEY)
    except Exception as error:  # any storage failure only makes this one line vaguer
        return f"{run_uri}/{layout.CHECKPOINTS_PREFIX} (could not read LATEST: {error})"
    if name is None:
        return f"{run_uri}/{layout.CHECKPOINTS_PREFIX} (no complete checkpoint yet)"
    return f"{run_uri}/{layout.CHECKPOINTS_PREFIX}{name}"
