"""A run's deadline: when the cloud stops its boxes, and whether the daily stop moves.

Without `fab train --hours` a run's deadline is the next daily stop (`autoShutdownTime`
in its zone): the stack as declared. `--hours H` sets it H hours from now, at most the
stack's `maxRunHours`; past the daily stop, the cloud's hard stop moves to it
(ops/cloud). `--hours auto` takes `fab plan`'s estimate for this dataset and size, with
room for evaluation and restarts. Either way the cloud enforces it, and the box's resume
unit starts nothing after it (launch.json's `deadline`).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from invoke.exceptions import Exit

from box.watchdog_config import daily_time
from ops.cloud import api as cloud
from ops.plan.estimate import PlanRequest, make_plan, stored_dataset_size
from ops.plan.throughput import load_measured
from ops.target.schema import Target
from stack import catalog
from trainer.config import TrainConfig
from trainer.quantities import duration_forms, flag_problem, parse_duration

AUTO = "auto"
# `--hours auto`: the plan's hours times this, plus this many, rounded up to whole hours.
# The plan counts every window as trained each epoch, so it errs long already; the room
# is for the first image pull, evaluations and a restart or two after spot evictions.
AUTO_FACTOR = 1.25
AUTO_EXTRA_HOURS = 0.5


@dataclass(frozen=True)
class Deadline:
    until: datetime.datetime
    """UTC: the boxes stop then, whatever the run is doing."""
    daily_stop: datetime.datetime | None
    """The next daily stop before this run (UTC), None when the stack does not say."""

    @property
    def past_daily_stop(self) -> bool:
        return self.daily_stop is not None and self.until > self.daily_stop

    def line(self, now: datetime.datetime) -> str:
        """`2026-11-25 06:00 CET (in 28.0 h), a run's deadline past the daily stop`."""
        local = self.until.astimezone()
        hours = (self.until - now).total_seconds() / 3600
        what = "a run's deadline past the daily stop" if self.past_daily_stop else "the daily stop"
        return f"{local:%Y-%m-%d %H:%M %Z} (in {hours:.1f} h), {what}"


def next_daily_stop(target: Target, now: datetime.datetime) -> datetime.datetime | None:
    """The first daily stop after `now` (UTC), in the zone's own time (daylight saving
    included); None for a target that names no daily stop."""
    if not target.auto_shutdown_time:
        return None
    try:
        zone = ZoneInfo(target.auto_shutdown_time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise Exit(
            f"{target.source}: autoShutdownTimeZone {target.auto_shutdown_time_zone!r} is no "
            "time zone this machine knows (pip install tzdata)"
        ) from None
    hours, minutes = daily_time(target.auto_shutdown_time)
    local_now = now.astimezone(zone)
    stop = local_now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if stop <= local_now:
        day = local_now.date() + datetime.timedelta(days=1)
        stop = datetime.datetime.combine(day, stop.timetz())
    return stop.astimezone(datetime.timezone.utc)


def parse_hours(text: str) -> float | str | None:
    """`--hours`: None when not given, AUTO, or a positive number of hours."""
    if not text:
        return None
    if text == AUTO:
        return AUTO
    try:
        hours = parse_duration(text, "h")
    except ValueError:
        hours = 0
    if hours <= 0:
        forms = f"{duration_forms('h')} above 0, or {AUTO}"
        raise Exit("fab train: " + flag_problem("--hours", text, forms, "90m"))
    return hours


def planned_hours(target: Target, data_uri: str, epochs: int) -> float | None:
    """`fab plan`'s hours for this run on the target's size over its boxes; None when the
    dataset's size or the size is unknown (a target file's box, a retired size)."""
    from trainer.storage import StorageError

    sizes = [size for size in catalog.sizes(target.cloud) if size.name == target.vm_size]
    if not sizes:
        return None
    try:
        windows, length = stored_dataset_size(data_uri)
        request = PlanRequest(
            windows=windows, epochs=epochs, window_length=length, cloud=target.cloud,
            spot=target.spot,
        )  # fmt: skip
        rows = make_plan(request, sizes, None, load_measured()).rows
    except (StorageError, OSError, ValueError):
        return None
    return rows[0].hours / target.node_count


def auto_hours(plan_hours: float) -> float:
    """`--hours auto`: the plan's estimate with room to spare, in whole hours."""
    return float(math.ceil(plan_hours * AUTO_FACTOR + AUTO_EXTRA_HOURS))


def run_deadline(target: Target, now: datetime.datetime, hours: float | None) -> Deadline:
    """The deadline of a run started `now`: the next daily stop, or `hours` from now."""
    daily = next_daily_stop(target, now)
    if hours is None:
        if daily is None:
            raise Exit(f"{target.source} names no daily stop (autoShutdownTime); pass --hours")
        return Deadline(daily, daily)
    cap = target.max_run_hours
    if cap and hours > cap:
        raise Exit(
            f"--hours {hours:g} is past this stack's maxRunHours ({cap}): ask for less, or set "
            f"glucose-training:maxRunHours (at most 168) and `pulumi up`"
        )
    # Whole seconds: what the clouds' schedules and tags can say.
    return Deadline((now + datetime.timedelta(hours=hours)).replace(microsecond=0), daily)


def hard_stop(
    target: Target, now: datetime.datetime, moved_to: datetime.datetime | None
) -> Deadline | None:
    """What stops the boxes next: a run's deadline still ahead (`moved_to`, as the cloud
    holds it), else the daily stop; None when the target names neither."""
    daily = next_daily_stop(target, now)
    if moved_to is not None and moved_to > now:
        return Deadline(moved_to, daily)
    return Deadline(daily, daily) if daily is not None else None


def crossing_warning(
    target: Target, now: datetime.datetime, plan_hours: float | None
) -> str | None:
    """What to say when a run of about `plan_hours` would outlast the next daily stop."""
    daily = next_daily_stop(target, now)
    if plan_hours is None or daily is None or now + datetime.timedelta(hours=plan_hours) <= daily:
        return None
    left = (daily - now).total_seconds() / 3600
    suggested = min(auto_hours(plan_hours), target.max_run_hours or math.inf)
    return (
        f"this run needs about {plan_hours:.1f} h (fab plan), but the boxes stop at "
        f"{target.auto_shutdown_time} {target.auto_shutdown_time_zone}, in {left:.1f} h; "
        f"it resumes only when someone starts them. `--hours {suggested:g}` (or "
        "`--hours auto`) moves the stop to the run's end"
    )


def for_run(target: Target, data_uri: str, epochs: int, hours_text: str, warn) -> Deadline | None:
    """A new start's deadline from `fab train`'s flags, before anything changes; None for
    a box no cloud knows of (it has no cloud-side stop). `warn` says a run would outlast
    the stop."""
    hours = parse_hours(hours_text)
    if not target.box_ids:
        if hours is not None:
            raise Exit(f"{target.source} names no cloud boxes: no cloud stop to move; drop --hours")
        return None
    now = datetime.datetime.now(datetime.timezone.utc)
    planned = None
    if hours in (None, AUTO):
        planned = planned_hours(target, data_uri, epochs or TrainConfig.epochs)
    if hours == AUTO:
        if planned is None:
            raise Exit(
                f"--hours auto: `fab plan` cannot estimate this run (the size of {data_uri} or "
                f"the throughput of {target.vm_size or 'this box'} is unknown); pass --hours H"
            )
        hours = min(auto_hours(planned), target.max_run_hours or math.inf)
    elif hours is None and (warning := crossing_warning(target, now, planned)):
        warn(warning)
    if hours is not None and not target.daily_stop_schedules:  # a stack from before deadlines
        raise Exit(f"{target.source} exports no dailyStopSchedules: `pulumi up`, then retry")
    return run_deadline(target, now, hours)


def hold(target: Target, found: Deadline, warn) -> None:
    """Have the cloud stop the boxes at `found`'s deadline (and bring them back until
    then); `warn` names each box it would not bring back."""
    if not target.daily_stop_schedules:  # a stack from before deadlines: the daily stop
        return
    cloud.set_deadline(target, found.until, found.past_daily_stop)
    for gap in cloud.recovery_gaps(target, found.until):
        warn(gap)
