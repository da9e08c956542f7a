"""A run's dollars: the time each of its boxes was up while the run lived, times its price.

A box bills while it is up, whatever it does, so the honest figure is its up time, not
the wall time since the run began: a box stopped overnight costs nothing, and a run
that finished hours ago costs no more. A box's up time comes from its own records
(`boots.jsonl` and `stops.jsonl` under BOX_ROOT/watchdog, box/contract.py's names): from
each boot to its stop record, and for the current boot until now. A boot without a
stop record that is not the last (a crash, a power loss) is counted until the next
boot: at most what it billed. Torch-free: `fab status` uses it on your machine, the
trainer for `summary.json`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainer.box_files import BOOTS_FILE, LAUNCH_RECORD, RECORD_AT, RECORD_BOOT_ID, STOPS_FILE

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class Uptime:
    """One boot of a box: from `booted_at` until `stopped_at` (None: up until now)."""

    booted_at: float
    stopped_at: float | None


def records(text: str | None) -> list[dict]:
    """The JSON objects of a .jsonl file's text; torn or foreign lines are skipped."""
    found = []
    for line in (text or "").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get(RECORD_AT), int | float):
            found.append(record)
    return found


def uptimes(
    boots: Iterable[dict], stops: Iterable[dict], current: tuple[str, float] | None = None
) -> list[Uptime]:
    """Each boot of a box and when it ended, oldest first. `current` is (boot id, boot
    time) of the boot the box is in now, when it is up: that one has not ended."""
    booted = {record.get(RECORD_BOOT_ID): float(record[RECORD_AT]) for record in boots}
    if current is not None:
        booted.setdefault(current[0], current[1])
    stopped = {}
    for record in stops:
        stopped.setdefault(record.get(RECORD_BOOT_ID), float(record[RECORD_AT]))
    ordered = sorted(booted.items(), key=lambda item: item[1])
    found = []
    for index, (boot_id, at) in enumerate(ordered):
        end = stopped.get(boot_id)
        if end is None and current is not None and boot_id == current[0]:
            found.append(Uptime(at, None))
            continue
        if end is None:
            later = [start for _, start in ordered[index + 1 :]]
            end = later[0] if later else None
        found.append(Uptime(at, end))
    return found


def billed_seconds(boots: list[Uptime], since: float, until: float) -> float:
    """How long the box was up between `since` and `until`."""
    total = 0.0
    for boot in boots:
        end = until if boot.stopped_at is None else min(boot.stopped_at, until)
        total += max(0.0, end - max(boot.booted_at, since))
    return total


@dataclass(frozen=True)
class RunCost:
    box_seconds: tuple[float, ...]
    """Each box's billed seconds while the run lived, box 0 first."""
    hourly_price_usd: float
    """One box's price (the price in force at launch)."""

    @property
    def usd(self) -> float:
        return sum(self.box_seconds) / SECONDS_PER_HOUR * self.hourly_price_usd

    def as_dict(self) -> dict:
        return {
            "usd": round(self.usd, 4),
            "box_hours": [round(s / SECONDS_PER_HOUR, 4) for s in self.box_seconds],
            "hourly_price_usd": self.hourly_price_usd,
        }


def run_cost(
    boxes: list[list[Uptime]], started_at: float, ended_at: float, hourly_price_usd: float
) -> RunCost:
    """The run's cost from each box's up times between its first start and its end (now,
    while it goes on)."""
    seconds = tuple(billed_seconds(boots, started_at, ended_at) for boots in boxes)
    return RunCost(seconds, hourly_price_usd)


RECORDS_ENV = "GLUCOSE_BOX_RECORDS"
"""Where the trainer container sees its box's records (BOX_ROOT/watchdog, read-only)."""


def current_boot(proc: Path = Path("/proc")) -> tuple[str, float] | None:
    """(boot id, boot time) of the kernel this runs on: a container shares its box's."""
    try:
        boot_id = (proc / "sys/kernel/random/boot_id").read_text().strip()
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return boot_id, float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def box_run_cost(run_dir: Path, now: float) -> RunCost | None:
    """The run's cost as its box sees it: `launch.json` (first start, price, boxes) and
    the box's own records; None where either is missing (a run started by hand). Every
    box of a multi-box run is counted as up when box 0 was: they start and stop
    together (`fab status` reads each box's own records for the exact figure)."""
    records = os.environ.get(RECORDS_ENV)
    try:
        launch = json.loads((Path(run_dir) / LAUNCH_RECORD).read_text())
        started, price = float(launch["started_at"]), float(launch["hourly_price_usd"])
        boxes = int(launch.get("boxes") or 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not records:
        return None
    boots = records_of(Path(records) / BOOTS_FILE)
    stops = records_of(Path(records) / STOPS_FILE)
    up = uptimes(boots, stops, current_boot())
    return run_cost([up] * boxes, started, now, price)


def records_of(path: Path) -> list[dict]:
    try:
        return records(path.read_text(errors="replace"))
    except OSError:
        return []
