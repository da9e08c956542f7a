"""The boxes a target names, each of its kind: this machine for the local target (no
SSH), boxes over SSH for a stack or a target file with hosts; and a stack's stopped
boxes started and waited for (`fab start`, `--start`).

Every task gets its boxes here, so no task needs to know which kind it drives: both
answer the same few calls (`ops.remote.ssh.Box`, `ops.remote.this_machine.ThisMachine`).
"""

from __future__ import annotations

from collections.abc import Callable

from invoke.exceptions import Exit

from ops.cloud import api as power
from ops.remote.ssh import Box
from ops.remote.this_machine import ThisMachine
from ops.target.schema import Target

AnyBox = Box | ThisMachine


def box_for(target: Target, node: int = 0, boot_wait_s: float | None = None) -> AnyBox:
    """Box `node` of the target (box 0, rank 0's, unless said)."""
    if not target.this_machine:
        return Box(target, node, boot_wait_s)
    if node != 0:
        raise Exit(f"{target.source} is this machine alone: no node {node}; expected 0")
    return ThisMachine(target)


def nodes(target: Target, others_wait_s: float | None = None) -> list[AnyBox]:
    """Every box of the target, box 0 first (rank order); `others_wait_s` bounds the
    wait for boxes 1..N-1 (a stopped spot box need not hold up a look at the run)."""
    return [box_for(target, 0)] + [
        box_for(target, node, others_wait_s) for node in range(1, target.node_count)
    ]


def start_boxes(where: Target, say: Callable[[str], None]) -> None:
    """Ask the cloud to start every stopped box (once any stop under way has ended; from
    the stack's first size, then its next sizes in place when it has no room), then wait
    until each is ready (SSH up, its setup done): what `fab start`, `fab train --start`
    and `fab status --start` do."""
    if where.this_machine:
        raise Exit(f"{where.source} is this machine: it is up while `fab` runs; nothing to start")
    say("asking the cloud to start the boxes")
    for box in power.start(where, say):
        say(box.line())
    for box in nodes(where):
        box.run("true")  # connecting waits for the boot and the box's `ready` marker
        say(f"box {box.node} ({box.address}) is up and ready")
        box.close()
