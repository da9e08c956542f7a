"""A run's dollars: the time each of its boxes was up while the run's container ran, times
its price.

A box bills while it is up, whatever it does, so the honest figure is its up time, not
the wall time since the run began: a box stopped overnight costs nothing, and a run
that finished hours ago costs no more. A box's up time comes from its own records
(`boots.jsonl` and `stops.jsonl` under BOX_ROOT/watchdog, box/contract.py's names): the
boot the box is in now counts until now, whatever its stop records say (a stop the
cloud refused leaves a record and a box that still bills); an earlier boot ends at its
last stop record (the one written as the OS went down). A boot without a stop record
that is not the last (a crash, a power loss) is counted until the next boot: at most
what it billed.

A run pays only for the spans its trainer ran (status.json's `ran`: each process's
start and last word), so the hours a stopped, preempted or killed run waits, and
another run's hours on the same box, are not its own. Runs on a box at once split it,
a sweep's trials as any run: each moment is shared evenly by the runs running then, so
a box's runs and trials add up to what the box billed while they ran. Each boot is
priced at its own size and market (its boot record's, box/boot_record.py): a box
`fab start` resized, or a fallback size, bills what it runs on; launch.json's
`hourly_prices_usd` holds the stack's candidates' prices (`fab train` writes it), and a
boot with no size on record takes the launch price. Torch-free: `fab status` uses it on
your machine, the trainer for `summary.json`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from box.contract import (
    BOOTS_FILE,
    RECORD_AT,
    RECORD_BOOT_ID,
    RECORD_MARKET,
    RECORD_SIZE,
    STOPS_FILE,
    LaunchRecord,
    RunRecord,
)

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class Uptime:
    """One boot of a box: from `booted_at` until `stopped_at` (None: up until now)."""

    booted_at: float
    stopped_at: float | None
    priced_as: str = ""
    """"<size> <market>" the box booted on ("" not on record: the launch price)."""


Span = tuple[float, float]
"""[start, end] of one process of a run, unix seconds."""


def records(text: str | None) -> list[dict]:
    """The JSON objects of a .jsonl file's text; torn or foreign lines are skipped."""
    found = []
    for line in (text or "").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # torn, or nested past what json follows
            continue
        if isinstance(record, dict) and isinstance(record.get(RECORD_AT), int | float):
            found.append(record)
    return found


def uptimes(
    boots: Iterable[dict], stops: Iterable[dict], current: tuple[str, float] | None = None
) -> list[Uptime]:
    """Each boot of a box and when it ended, oldest first. `current` is (boot id, boot
    time) of the boot the box is in now, when it is up: that one has not ended, even
    where a stop was recorded (the cloud refused it). An earlier boot ends at its last
    stop record: the shutdown's, after any the cloud refused."""
    boots = list(boots)
    booted = {record.get(RECORD_BOOT_ID): float(record[RECORD_AT]) for record in boots}
    priced = {record.get(RECORD_BOOT_ID): _priced_as(record) for record in boots}
    if current is not None:
        booted.setdefault(current[0], current[1])
    stopped: dict = {}
    for record in stops:
        boot_id, at = record.get(RECORD_BOOT_ID), float(record[RECORD_AT])
        stopped[boot_id] = max(stopped.get(boot_id, at), at)
    ordered = sorted(booted.items(), key=lambda item: item[1])
    found = []
    for index, (boot_id, at) in enumerate(ordered):
        if current is not None and boot_id == current[0]:
            found.append(Uptime(at, None, priced.get(boot_id, "")))
            continue
        end = stopped.get(boot_id)
        if end is None:
            later = [start for _, start in ordered[index + 1 :]]
            end = later[0] if later else None
        found.append(Uptime(at, end, priced.get(boot_id, "")))
    return found


def _priced_as(record: dict) -> str:
    size, market = record.get(RECORD_SIZE), record.get(RECORD_MARKET)
    return f"{size} {market}" if isinstance(size, str) and isinstance(market, str) else ""


def billed_seconds(boots: list[Uptime], since: float, until: float) -> float:
    """How long the box was up between `since` and `until`."""
    total = 0.0
    for boot in boots:
        end = until if boot.stopped_at is None else min(boot.stopped_at, until)
        total += max(0.0, end - max(boot.booted_at, since))
    return total


def _up_at(boots: list[Uptime], moment: float) -> bool:
    return any(
        boot.booted_at <= moment and (boot.stopped_at is None or moment < boot.stopped_at)
        for boot in boots
    )


def shared_seconds(
    boots: list[Uptime], spans: Iterable[Span], others: Iterable[Span] = ()
) -> float:
    """How long the box was up during `spans`, each moment divided evenly between this
    run and the `others` (the spans of the sweep's other trials) running then."""
    others = list(others)
    edges = [edge for boot in boots for edge in (boot.booted_at, boot.stopped_at)]
    edges += [edge for span in others for edge in span]
    total = 0.0
    for start, end in spans:
        cuts = sorted({start, end, *(e for e in edges if e is not None and start < e < end)})
        for left, right in itertools.pairwise(cuts):
            middle = (left + right) / 2
            if _up_at(boots, middle):
                sharing = 1 + sum(1 for s, e in others if s <= middle < e)
                total += (right - left) / sharing
    return total


def ran_spans(record: RunRecord, now: float | None = None) -> list[Span]:
    """status.json's `ran` as spans, oldest first; a malformed pair is skipped. `now`:
    the run's process is running, so its span (the last) lasts until now."""
    spans = []
    for pair in record.ran or []:
        if (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(t, int | float) and not isinstance(t, bool) for t in pair)
        ):
            spans.append((float(pair[0]), max(float(pair[0]), float(pair[1]))))
    if spans and now is not None:
        spans[-1] = (spans[-1][0], max(spans[-1][0], now))
    return spans


@dataclass(frozen=True)
class RunCost:
    box_seconds: tuple[float, ...]
    """Each box's billed seconds while the run's trainer ran, box 0 first (a trial's
    share of them)."""
    hourly_price_usd: float
    """One box's price at launch: what a boot with no size on record costs."""
    boot_usd: float | None = None
    """The dollars with each boot at its own size's price; None: all at the launch price."""

    @property
    def usd(self) -> float:
        if self.boot_usd is not None:
            return self.boot_usd
        return sum(self.box_seconds) / SECONDS_PER_HOUR * self.hourly_price_usd

    def as_dict(self) -> dict:
        return {
            "usd": round(self.usd, 4),
            "box_hours": [round(s / SECONDS_PER_HOUR, 4) for s in self.box_seconds],
            "hourly_price_usd": self.hourly_price_usd,
        }


def run_cost(
    boxes: list[list[Uptime]],
    spans: list[Span],
    hourly_price_usd: float,
    others: Iterable[Span] = (),
    prices: Mapping[str, float] | None = None,
) -> RunCost:
    """The run's cost from each box's up times during the spans its trainer ran, shared
    with the `others` (a sweep's other trials) running at the same moments; each boot at
    `prices`' figure for its size and market (launch.json's LAUNCH_PRICES), else at
    `hourly_price_usd`."""
    others = list(others)
    seconds = tuple(shared_seconds(boots, spans, others) for boots in boxes)
    if not prices:
        return RunCost(seconds, hourly_price_usd)
    usd = sum(
        shared_seconds([boot], spans, others) / SECONDS_PER_HOUR
        * _price(prices, boot.priced_as, hourly_price_usd)
        for boots in boxes
        for boot in boots
    )  # fmt: skip
    return RunCost(seconds, hourly_price_usd, usd)


def _price(prices: Mapping[str, float], priced_as: str, launch_price: float) -> float:
    price = prices.get(priced_as)
    return float(price) if isinstance(price, int | float) and price >= 0 else launch_price


def launch_prices(launch: LaunchRecord) -> dict[str, float]:
    """launch.json's table of prices by "<size> <market>"; {} when it has none."""
    table = launch.hourly_prices_usd or {}
    return {k: float(v) for k, v in table.items() if isinstance(v, int | float)}


RECORDS_ENV = "GLUCOSE_BOX_RECORDS"
"""Where the trainer container sees its box's records (BOX_ROOT/watchdog, read-only)."""
RUNS_ENV = "GLUCOSE_BOX_RUNS"
"""Where the trainer container sees the box's runs folder (BOX_ROOT/runs, read-only): the
runs beside it, which share the box's time with it. Unset, the folder its run dir is in
(a sweep's container has the whole runs folder there)."""


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
    launch = LaunchRecord.read(run_dir)
    if launch.started_at is None or launch.hourly_price_usd is None:
        return None
    started, price, boxes = launch.started_at, launch.hourly_price_usd, launch.boxes or 1
    if not records:
        return None
    boots = records_of(Path(records) / BOOTS_FILE)
    stops = records_of(Path(records) / STOPS_FILE)
    up = uptimes(boots, stops, current_boot())
    spans = ran_spans(RunRecord.read(run_dir), now) or [(started, now)]
    # A run's container sees the box's runs at RUNS_ENV; a sweep's trials are in them.
    runs_dir = Path(os.environ.get(RUNS_ENV) or Path(run_dir).parent)
    others = sharing_spans(Path(run_dir).name, run_statuses(runs_dir))
    return run_cost([up] * boxes, spans, price, others, launch_prices(launch))


def sharing_spans(run_id: str, statuses: Mapping[str, RunRecord]) -> list[Span]:
    """The spans of every run on the box but `run_id`, from `statuses` (run id -> its
    status.json, of the box's runs folder): plain runs and a sweep's trials alike share
    each moment of the box with the others running then. The trainer (`box_run_cost`)
    and `fab status` read the same files, so a run's dollars are the same wherever they
    are shown, and a box's runs add up to what it billed while they ran."""
    return [
        span
        for other, record in sorted(statuses.items())
        if other != run_id
        for span in ran_spans(record)
    ]


def run_statuses(runs_dir: Path) -> dict[str, RunRecord]:
    """The status of each run in the box's runs folder `runs_dir`; none where it cannot
    be listed."""
    try:
        found = [path for path in runs_dir.iterdir() if path.is_dir()]
    except OSError:
        return {}
    return {path.name: RunRecord.read(path) for path in found}


def records_of(path: Path) -> list[dict]:
    try:
        return records(path.read_text(errors="replace"))
    except OSError:
        return []
