"""`fab start`: start the stack's stopped boxes and wait until each is ready."""

from __future__ import annotations

from invoke.exceptions import Exit
from rich.console import Console

from ops.cloud import api as power
from ops.cloud.move import move as move_boxes
from ops.cloud.power import GONE
from ops.remote.boxes import nodes
from ops.target.resolve import resolve_target
from ops.target.schema import Target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task

console = Console(stderr=True, soft_wrap=True)


def start_boxes(where: Target) -> None:
    """Ask the cloud to start every stopped box (trying again, then the stack's next sizes
    in place when it has no room), then wait until each is ready (SSH up, its setup
    done): what `fab start`, `fab train --start` and `fab status --start` do."""
    if where.this_machine:
        raise Exit(f"{where.source} is this machine: it is up while `fab` runs; nothing to start")
    for box in power.states(where):
        if box.state == GONE:
            raise Exit(f"{box.line()}: `pulumi up` makes it again")
    console.print("asking the cloud to start the boxes")
    for box in power.start(where, console.print):
        console.print(box.line())
    for box in nodes(where):
        box.run("true")  # connecting waits for the boot and the box's `ready` marker
        console.print(f"box {box.node} ({box.address}) is up and ready")
        box.close()


@task(
    help={
        "target": TARGET_HELP,
        "stack": STACK_HELP,
        "move": "make the boxes again in another zone (their disks are lost; a run resumes "
        "from storage with `fab train --run ID`): when their zone has no room for any size",
        "dry-run": "with --move: print the Pulumi commands, run nothing",
    }
)
def start(c, target="", stack="", move=False, dry_run=False):
    """Start the stack's stopped boxes and wait until each is ready."""
    where = resolve_target(target or None, stack or None)
    if move:
        move_boxes(where, stack or None, console.print, dry_run=dry_run)
        if dry_run:
            return
        where = resolve_target(target or None, stack or None)  # the new boxes' outputs
    start_boxes(where)
