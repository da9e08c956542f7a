"""`fab start`: start the stack's stopped boxes and wait until each is ready."""

from __future__ import annotations

from invoke.exceptions import Exit
from rich.console import Console

from ops.cloud import api as power
from ops.cloud.power import GONE
from ops.remote.boxes import nodes
from ops.target.resolve import Target, resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task

console = Console(stderr=True, soft_wrap=True)


def start_boxes(where: Target) -> None:
    """Ask the cloud to start every stopped box, then wait until each is ready (SSH up,
    its setup done): what `fab start`, `fab train --start` and `fab status --start` do."""
    if where.this_machine:
        raise Exit(f"{where.source} is this machine: it is up while `fab` runs; nothing to start")
    for box in power.states(where):
        if box.state == GONE:
            raise Exit(f"{box.line()}: `pulumi up` makes it again")
    with console.status("asking the cloud to start the boxes"):
        for box in power.start(where):
            console.print(box.line())
    for box in nodes(where):
        box.run("true")  # connecting waits for the boot and the box's `ready` marker
        console.print(f"box {box.node} ({box.address}) is up and ready")
        box.close()


@task(help={"target": TARGET_HELP, "stack": STACK_HELP})
def start(c, target="", stack=""):
    """Start the stack's stopped boxes and wait until each is ready."""
    start_boxes(resolve_target(target or None, stack or None))
