#!/usr/bin/env python3
"""Why the box stopped: one JSON line per stop in BOX_ROOT/watchdog/stops.jsonl.

Each record says when, in which boot, `by` whom and a `summary` line (contract.STOP_BY,
STOP_SUMMARY). Who stops a box, by `by`: `idle-watchdog` (idle for idleShutdownMinutes:
no trainer, lease, SSH session or busy GPU; box/watchdog.py), `hung-trainer` (a
trainer made no step for hungTrainerMinutes, then idle), `daily-stop` (the cloud's
schedule at autoShutdownTime), `spot` (an eviction), `reboot`, and `outside` (the AWS
idle alarm, the budget stop, a run's hard stop at its deadline, the console, a CLI).

On the root disk, so it survives the stop; `fab status` shows the last one. The
watchdog appends its record before it stops billing. Run as a program (the
glucose-stop-record unit's ExecStop, at every OS shutdown) it records a shutdown
that no watchdog record of this boot explains: the daily stop, a spot eviction,
a reboot, or something outside the box (the AWS alarm, the console, a CLI).
A record that cannot be written (a full disk) or is not written within a few
seconds (a stalled one) is logged and skipped: it never holds up a stop. A shutdown
that a watchdog record explains adds a copy of it marked `shutdown`, at the moment the
box went down: the end of its bill (trainer/reports/cost.py). Standard library only.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import zoneinfo
from collections.abc import Callable

from box import contract, instance_metadata, user_files
from box.bounded_command import CommandTimeout, run_bounded
from box.bounded_write import write_within
from box.box_time import now_seconds, read_boot_id
from box.watchdog_config import WatchdogConfig, daily_time, load_config_or_say_why

TAIL_BYTES = 64 * 1024
DAILY_STOP_WINDOW_SECONDS = 20 * 60
SPOT_NOTICE_WINDOW_SECONDS = 10 * 60
SYSTEMCTL_TIMEOUT_SECONDS = 10


def log(message: str) -> None:
    print(f"glucose-stop-record: {message}", flush=True)


def append(config: WatchdogConfig, record: dict, log: Callable[[str], None]) -> None:
    """Add `record`, waiting at most bounded_write.WRITE_TIMEOUT_SECONDS for the disk."""
    path = config.stops_path
    line = json.dumps(record, sort_keys=True) + "\n"

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    try:
        write_within(write)
    except OSError as error:
        log(f"WARNING: stop not recorded in {path}: {error}")


def last_record(config: WatchdogConfig) -> dict | None:
    # Root's own file (BOX_ROOT/watchdog is root's): only its tail is read.
    try:
        with open(config.stops_path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except OSError:
        return None
    for line in reversed(data.decode(errors="replace").splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return None


def watchdog_record(state: dict, now: float) -> dict:
    """The watchdog's own stop: what it saw, in words `fab status` prints as they are."""
    signals = state["signals"]
    gpu = signals["gpu_utilization"]
    seen = [f"GPU {max(gpu or [0])}%" if gpu is not None else "no GPU reading", "no SSH"]
    idle_minutes = round((state["stop_at"] - state["idle_since"]) / 60)
    hung = state["hung_trainer_minutes"]
    if state["hung_run_ids"]:
        runs = ", ".join(state["hung_run_ids"])
        why = f"run {runs} hung (no progress for {hung} min), then {idle_minutes} min idle"
    elif state.get("hung_preparations"):
        names = ", ".join(state["hung_preparations"])
        why = f"preparation {names} hung (no progress for {hung} min), then {idle_minutes} min idle"
    elif state.get("hung_sweeps"):
        names = ", ".join(state["hung_sweeps"])
        why = f"sweep {names} hung (no trial moved for {hung} min), then {idle_minutes} min idle"
    else:
        why = f"{idle_minutes} min with no trainer"
    return {
        contract.RECORD_AT: now,
        contract.RECORD_BOOT_ID: state["boot_id"],
        contract.STOP_BY: "hung-trainer" if state["hung_run_ids"] else "idle-watchdog",
        contract.STOP_SUMMARY: f"by the idle watchdog: {why}, {', '.join(seen)}",
    }


def _rebooting() -> bool:
    try:
        jobs = run_bounded(["systemctl", "list-jobs", "--no-legend"], SYSTEMCTL_TIMEOUT_SECONDS)
    except (OSError, CommandTimeout):
        return False
    return "reboot.target" in jobs.stdout


def _at_daily_stop(config: WatchdogConfig, now: float) -> bool:
    """Whether `now` is at most DAILY_STOP_WINDOW_SECONDS after a daily stop.

    The stop that explains a shutdown may fall on the day before in the stack's zone (a
    23:50 stop, a shutdown at 00:05), so yesterday's counts as much as today's; compared
    as instants, so a DST change in the window does not move it.
    """
    if not config.daily_stop_time:
        return False
    try:
        zone = zoneinfo.ZoneInfo(config.daily_stop_time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = datetime.timezone.utc
    today = datetime.datetime.fromtimestamp(now, zone).date()
    hours, minutes = daily_time(config.daily_stop_time)
    for day in (today - datetime.timedelta(days=1), today):
        stop = datetime.datetime.combine(day, datetime.time(hours, minutes), tzinfo=zone)
        if 0 <= now - stop.timestamp() < DAILY_STOP_WINDOW_SECONDS:
            return True
    return False


def _preempted_run(config: WatchdogConfig, now: float) -> str | None:
    for run_id in user_files.directory_names(config.runs_dir):
        status = contract.RunRecord.from_dict(
            user_files.read_json(config.runs_dir, run_id, contract.STATUS_FILE)
        )
        updated_at = user_files.sane_time(status.updated_at, now)
        recent = updated_at is not None and now - updated_at < SPOT_NOTICE_WINDOW_SECONDS
        if status.state == contract.STATE_PREEMPTED and recent:
            return run_id
    return None


def _spot_notice(config: WatchdogConfig) -> bool:
    """The cloud's own word that this is a spot eviction, asked of instance metadata (a
    box with no run saw no notice); at most two calls of `http_timeout_seconds`."""
    try:
        if config.cloud == "aws":
            instance_metadata.aws_metadata(config, "spot/instance-action")  # 404: none
            return True
        if config.cloud == "azure":
            events = instance_metadata.azure_scheduled_events(config)
            return any(event.get("EventType") == "Preempt" for event in events)
    except instance_metadata.MetadataError:
        pass
    return False


def shutdown_record(config: WatchdogConfig, now: float, boot_id: str) -> dict:
    """What stopped the box when the watchdog did not."""
    preempted = _preempted_run(config, now)
    if _rebooting():
        by, summary = "reboot", "by a reboot"
    elif preempted:
        by, summary = "spot", f"by a spot eviction (run {preempted} was preempted)"
    elif _spot_notice(config):
        by, summary = "spot", "by a spot eviction (the cloud's notice)"
    elif _at_daily_stop(config, now):
        zone = config.daily_stop_time_zone
        by, summary = "daily-stop", f"by the daily stop ({config.daily_stop_time} {zone})"
    else:
        by = "outside"
        summary = "from outside the box (AWS idle alarm, budget stop, console, CLI or the cloud)"
    return {
        contract.RECORD_AT: now,
        contract.RECORD_BOOT_ID: boot_id,
        contract.STOP_BY: by,
        contract.STOP_SUMMARY: summary,
    }


def main() -> int:
    config = load_config_or_say_why("glucose-stop-record")
    if config is None:
        return 2
    boot_id = read_boot_id(config.boot_id_path)
    last = last_record(config)
    if last is not None and last.get(contract.RECORD_BOOT_ID) == boot_id:
        log(f"shutdown already explained: {last.get(contract.STOP_SUMMARY)}")
        if not last.get(contract.STOP_SHUTDOWN):
            # The moment billing ended: the watchdog's record was written before its first
            # stop request, which the cloud may have refused for a while.
            append(
                config,
                {**last, contract.RECORD_AT: now_seconds(), contract.STOP_SHUTDOWN: True},
                log,
            )
        return 0
    record = shutdown_record(config, now_seconds(), boot_id)
    log(f"recording the shutdown: {record[contract.STOP_SUMMARY]}")
    append(config, record, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
