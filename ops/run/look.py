"""What `fab status` shows: the boxes' power first, then the run as its boxes tell it.

A stopped cloud box is said in seconds (the cloud's API, not a 10-minute SSH wait),
with what stopped it and how to start it; a box that answers gives the run's snapshot
(`ops.run.status`). Once as text, once as JSON, or live (`--watch`).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from invoke.exceptions import Exit
from rich.console import Console
from rich.live import Live
from rich.text import Text

from ops.cloud import api as power
from ops.cloud.power import RUNNING, STARTING, BoxPower
from ops.remote.boxes import nodes
from ops.run import deadline, ids, on_box, sweep_status
from ops.run import status as run_status
from ops.runs import listing
from ops.target.guard_rails import unbilled_note
from ops.target.schema import Target
from ops.terminal_text import printable
from stack.catalog import CatalogError
from stack.placement import hourly_price_usd, placement_line

# A look at a run waits this long for boxes 1..N-1: one of them down (a spot box
# evicted) must not hold up box 0, where the run is, for the 10-minute boot wait.
OTHER_BOX_WAIT_SECONDS = 20


@dataclass
class StatusView:
    """One look: the boxes' power (cloud boxes), and the run when box 0 answered."""

    target: Target
    powers: list[BoxPower] = field(default_factory=list)
    hard_stop: deadline.Deadline | None = None
    """What stops the boxes next, cloud-side: a run's deadline or the daily stop."""
    snapshot: run_status.RunSnapshot | None = None
    sweep: sweep_status.SweepView | None = None
    """When `--run` names a sweep."""
    lines: list[str] = field(default_factory=list)
    """What else to say: the other boxes' part of the run, or why there is no run."""

    def placement(self) -> str:
        """`g5.xlarge us-east-1b on-demand $1.01/h (fallback 2 of 4; g6.xlarge: ...)`:
        what the boxes run on (box 0's boot record once it answered, which knows a
        resize by `fab start`, else the stack's outputs), and why not the first choice;
        "" for a box no `pulumi up` placed."""
        if not self.target.placement:
            return ""
        taken = dict(self.target.placement)
        booted = (
            self.snapshot.box.uptime[-1].priced_as
            if self.snapshot and self.snapshot.box.uptime
            else ""
        )
        if booted:
            taken["size"], taken["market"] = booted.split(" ", 1)
        try:
            price = hourly_price_usd(self.target.cloud, taken)
        except CatalogError:
            price = None
        return placement_line(taken, self.target.placement_tried, price)

    def render(self) -> str:
        parts = [box.line() for box in self.powers]
        if placed := self.placement():
            parts.append(f"placement:  {placed}")
        if self.hard_stop is not None:
            now = datetime.datetime.now(datetime.timezone.utc)
            parts.append(f"hard stop:  {self.hard_stop.line(now)}")
        if self.snapshot is not None:
            parts.append(
                run_status.render(
                    self.snapshot,
                    self.target.hourly_price_usd,
                    self.target.spot,
                    unbilled_note(self.target),
                )
            )
        if self.sweep is not None:
            parts += self.sweep.lines(time.time())
        return "\n".join([*parts, *self.lines])

    def to_json(self) -> dict:
        snap = self.snapshot
        found = {
            "target": self.target.source,
            "power": [vars(box) for box in self.powers],
            "hard_stop": self.hard_stop.until.isoformat() if self.hard_stop else None,
            "past_daily_stop": bool(self.hard_stop and self.hard_stop.past_daily_stop),
            "notes": self.lines,
            "placement": self.placement() or None,
            "run": None,
            "sweep": self.sweep.to_json() if self.sweep else None,
        }
        if snap is not None:
            spent = snap.cost(self.target.hourly_price_usd)
            found["run"] = {
                "run_id": snap.run_id,
                "state": snap.state,
                "status": snap.status.known(),
                "last_metrics": snap.last_metrics,
                "gpus": snap.gpus,
                "launch": snap.launch.to_json(),
                "cost": spent.as_dict() if spent else None,
                "watchdog": snap.box.watchdog,
                "last_stop": snap.box.last_stop,
            }
        return found


def look(target: Target, run: str = "") -> StatusView:
    """The boxes' power, then (when box 0 is up) the run `run` or the newest one."""
    view = StatusView(target)
    if target.box_ids:
        view.powers = power.states(target)
        view.hard_stop = _hard_stop(target)
        if view.powers[0].state not in (RUNNING, STARTING):
            view.lines.append(
                "box 0 is not running, and with it the run's files: `fab status --start` "
                "starts the stack's boxes and looks, `fab runs` lists what storage holds"
            )
            return view
    box, *others = nodes(target, OTHER_BOX_WAIT_SECONDS)
    try:
        run_id = run or next(iter(on_box.run_ids(box)), None)
        if run_id is None:
            view.lines.append(f"run:        none on {box.address} (start one with `fab train`)")
            view.lines += run_status.box_lines(run_status.box_snapshot(box), time.time())
            return view
        named = ids.named(box, run_id) if run else ids.Named(run_id)
        if named.is_sweep:
            view.sweep = sweep_status.look(box, run_id)
            view.lines += run_status.box_lines(run_status.box_snapshot(box), time.time())
            return view
        view.snapshot = run_status.snapshot(box, run_id, others)
        if view.snapshot.state == run_status.NOT_STARTED:
            view.snapshot = _kept_elsewhere(view.snapshot, target, box.address)
        if named.trial_of:
            sweep = f"`fab status --run {named.trial_of}`"
            view.lines.append(f"sweep:      {named.trial_line()}: {sweep}")
        view.lines += [_node_line(other, run_id) for other in others]
        return view
    finally:
        for each in (box, *others):
            each.close()


def _kept_elsewhere(
    snapshot: run_status.RunSnapshot, target: Target, address: str
) -> run_status.RunSnapshot:
    """A run the box has nothing of, as storage or a local folder (`make demo`'s, `fab
    download`'s) records it: what `fab runs` says of it too."""
    found = listing.find(target.storage_uri or None, listing.local_dirs(""), snapshot.run_id)
    if found is None:
        return snapshot
    row, folder = found
    return dataclasses.replace(snapshot, state=f"{row.state} (not on {address}: {folder})")


def _hard_stop(target: Target) -> deadline.Deadline | None:
    moved_to = power.deadline(target) if target.daily_stop_schedules else None
    return deadline.hard_stop(target, datetime.datetime.now(datetime.timezone.utc), moved_to)


def _node_line(box, run_id: str) -> str:
    """Box K's part of the run in a line, made safe to print (its heartbeat is its own)."""
    try:
        return printable(run_status.node_line(box, run_id))
    except Exit as error:
        return printable(f"node {box.node}:     unreachable: {error.message}")


def watch(looking: Callable[[], StatusView], every_s: float) -> None:
    """Look again every `every_s` seconds, in place, until Ctrl-C."""
    console = Console()
    with Live(Text(looking().render()), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(every_s)
                stamp = time.strftime("%H:%M:%S")
                live.update(Text(f"{looking().render()}\n(at {stamp}; Ctrl-C leaves)"))
                live.refresh()
        except KeyboardInterrupt:
            return
