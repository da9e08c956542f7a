"""`fab box-update`: the box programs and settings of this checkout, on the running boxes.

The work is `ops.remote.update`'s; this task picks the boxes and the settings (each of
cloud-init's guard settings from the flag, the stack's outputs or a target file's same
keys, else the box's own), then updates every box of the stack in turn.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit
from rich.console import Console

from ops.remote import update as updates
from ops.target.resolve import TARGET_ENV, resolve_target, stack_outputs
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from stack import box_packing

console = Console(stderr=True, soft_wrap=True)


def _configured_outputs(target: str, stack: str) -> dict[str, Any]:
    """The stack's outputs, or the target file's keys."""
    path = target or os.environ.get(TARGET_ENV)
    return json.loads(Path(path).read_text()) if path else stack_outputs(stack or None)


def _described(settings: updates.BoxSettings) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(settings.guard.items()))


@task(
    durations={"idle_shutdown_minutes": "m"},
    help={
        "idle-shutdown-minutes": "render the watchdog with this (default: the stack's setting)",
        "dry-run": "say which programs and settings each box would get, change nothing",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def box_update(c, idle_shutdown_minutes=0, dry_run=False, target="", stack=""):
    """Push box programs and settings to running boxes, no reboot."""
    where = resolve_target(target or None, stack or None)
    if where.this_machine:  # its watchdog would stop a cloud's billing; this machine has none
        raise Exit(
            f"{where.source} is this machine: box programs are for boxes `pulumi up` made, "
            "and no watchdog belongs on your own machine; nothing to update"
        )
    outputs = _configured_outputs(target, stack)
    overrides = {"idle_shutdown_minutes": idle_shutdown_minutes or None}
    programs = box_packing.build_programs()
    for box in updates.each_box(where):
        settings = updates.settings_for(where, outputs, overrides, box)
        text = updates.settings_text(settings)
        if dry_run:
            print(
                f"{box.address}: would install box programs {programs.sha256[:12]} with "
                f"settings {_described(settings)}, then turn the guard on (setup-box.sh guard)"
            )
            continue
        with console.status(f"updating {box.address}"):
            updates.update_box(box, programs, text)
        print(
            f"{box.address}: box programs {programs.sha256[:12]} installed "
            f"(watchdog: {_described(settings)}), guard on"
        )
        box.close()
