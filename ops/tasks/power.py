"""`fab start`: start the stack's stopped boxes and wait until each is ready."""

from __future__ import annotations

from rich.console import Console

from ops.cloud.move import move as move_boxes
from ops.remote.boxes import start_boxes
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task

console = Console(stderr=True, soft_wrap=True)


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
    start_boxes(where, console.print)
