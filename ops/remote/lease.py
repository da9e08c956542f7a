"""Leases: how `fab` keeps the box's idle watchdog off for a bounded while.

A lease is BOX_ROOT/leases/<name>.json (`box.contract.LEASE_FIELDS`), stamped with the
box's clock (the watchdog compares with its own). It expires by itself; the watchdog
caps any lease at `contract.MAX_LEASE_MINUTES` whatever it says (box/busy_signals.py),
so a forgotten one costs hours, not weeks.
"""

from __future__ import annotations

import json
import shlex

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.remote.ssh import Box
from trainer.quantities import duration_forms, flag_problem, parse_duration

console = Console(stderr=True, soft_wrap=True)


def lease_path(box: Box, name: str) -> str:
    return contract.lease_path(box.root, name)


def parse_minutes(text: str) -> int:
    """`2h`, `90m`, `1h30m`, `1.5` (hours) or `0`, in whole minutes (a moment's hold is
    one); Exit beyond contract.MAX_LEASE_MINUTES."""
    try:
        hours = parse_duration(text, "h")
    except ValueError:
        hours = -1
    if hours < 0:
        forms = f"{duration_forms('h')}, or 0 to end a hold"
        raise Exit(flag_problem("fab hold", text, forms, "90m"))
    minutes = max(1, round(hours * 60)) if hours else 0
    if minutes > contract.MAX_LEASE_MINUTES:
        raise Exit(
            f"duration {text} is over the {contract.MAX_LEASE_MINUTES // 60}h cap of a hold; "
            "hold again later, or keep an SSH terminal open"
        )
    return minutes


def write(box: Box, name: str, minutes: int, reason: str) -> float | None:
    """Lease the box for `minutes`; the box-clock expiry, or None when it could not be written."""
    box_now = box.run("date +%s", check=False)
    if box_now.exited != 0:
        console.print(f"[yellow]warning:[/] no lease on {box.address}: {box_now.stderr.strip()}")
        return None
    written_at = int(box_now.stdout.strip())
    lease = json.dumps(contract.lease_record(written_at, minutes, reason))
    path = shlex.quote(lease_path(box, name))
    directory = shlex.quote(f"{box.root}/{contract.LEASES_DIR}")
    done = box.run(
        f"mkdir -p {directory} && cat > {path}.tmp && mv {path}.tmp {path}",
        stdin=lease,
        check=False,
    )
    if done.exited != 0:
        # An old box without BOX_ROOT/leases: start-up goes on, unprotected.
        console.print(f"[yellow]warning:[/] no lease on {box.address}: {done.stderr.strip()}")
        return None
    return written_at + minutes * 60


def release(box: Box, name: str) -> None:
    box.run(f"rm -f {shlex.quote(lease_path(box, name))}", check=False)
