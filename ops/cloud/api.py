"""A box's power and a run's deadline, asked of the target's cloud: picks the module
(`aws`, `azure`) that asks it."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from types import ModuleType

from invoke.exceptions import Exit

from ops.cloud import capacity
from ops.cloud.power import RUNNING, STARTING, BoxPower
from ops.target.schema import Target


def cloud_api(target: Target) -> ModuleType:
    """The power module of the target's cloud; Exit for a box no cloud knows of."""
    if not target.box_ids:
        raise Exit(
            f"{target.source} names no cloud boxes (no boxIds): `fab` cannot ask whether "
            "the box is up or start it; start it yourself, then retry"
        )
    if target.cloud == "aws":
        from ops.cloud import aws

        return aws
    if target.cloud == "azure":
        from ops.cloud import azure

        return azure
    raise Exit(f"{target.source}: cloud {target.cloud!r} has no power API; expected aws or azure")


def states(target: Target) -> list[BoxPower]:
    """Every box's power, box 0 first."""
    return cloud_api(target).states(target)


def start(target: Target, say: Callable[[str], None] = lambda line: None) -> list[BoxPower]:
    """Ask the cloud to start every stopped box (a stopping one once it has stopped), from
    the stack's first size, trying again, then its next sizes in place when it has no
    room (ops/cloud/capacity.py), telling `say` each try; their power afterwards."""
    return capacity.start(cloud_api(target), target, say)


def set_deadline(target: Target, until: datetime.datetime, past_daily_stop: bool) -> None:
    """The cloud stops the boxes at `until` (moving the daily stop when `past_daily_stop`)
    and, where the stack recovers, brings an interrupted box back until then."""
    cloud_api(target).set_deadline(target, until, past_daily_stop)


def clear_deadline(target: Target) -> None:
    """No run's deadline any more: the daily stop as the stack declares it."""
    cloud_api(target).clear_deadline(target)


def deadline(target: Target) -> datetime.datetime | None:
    """The deadline the cloud enforces now (UTC), or None: the daily stop holds."""
    return cloud_api(target).deadline(target)


def recovery_gaps(target: Target, until: datetime.datetime) -> list[str]:
    """What would keep an interrupted box from coming back before `until`, one line each."""
    return cloud_api(target).recovery_gaps(target, until)


def stopped_message(box: BoxPower, target: Target, task_hint: str = "") -> str:
    """One line for a task that needs `box` up: what it is, and what starts it."""
    also = f"; {task_hint}" if task_hint else ""
    return f"{box.line()}: `fab start` starts every box of {target.source}{also}"


def require_up(target: Target, nodes: list[int], task_hint: str = "") -> None:
    """Return when the boxes `nodes` are running or starting (a task may wait for a boot);
    Exit at once, in one line, when one is stopped, stopping or gone."""
    if not target.box_ids:
        return
    down = [
        box for box in states(target) if box.node in nodes and box.state not in (RUNNING, STARTING)
    ]
    if down:
        raise Exit(stopped_message(down[0], target, task_hint))
