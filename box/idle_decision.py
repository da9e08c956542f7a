"""The watchdog's decision: busy, idle (and for how long), or time to stop billing.

A pure function of the signals, the previous state and the time, so every rule
reads in one place. The state it returns is what the watchdog's state file holds
and what `fab status` shows as the countdown. Standard library only.
"""

from __future__ import annotations

from box.busy_signals import Preparation, Signals, Sweep, Trainer
from box.watchdog_config import WatchdogConfig

STATE_VERSION = 2
# The timer looks every minute; a longer silence means the watchdog was not
# running (stopped by hand, box suspended), so nobody can say the box was idle
# all that time and the countdown starts over rather than firing at once.
STALE_STATE_SECONDS = 10 * 60
# A stop the cloud accepted is not repeated every minute while it takes effect; a box
# still running this long after one is STILL BILLED (box/watchdog.py asks again).
STOP_RETRY_SECONDS = 5 * 60
# A stop the cloud refused (or left unanswered) is retried 1, 2, 4, ... minutes later, at
# most this far apart.
MAX_STOP_BACKOFF_SECONDS = 30 * 60
# Carried over from the last state while a stop is pending.
STOP_KEYS = (
    "stop_requested_at",
    "stop_method",
    "stop_failures",
    "stop_error",
    "stop_recorded",
    "stop_accepted",
)
# The wall-clock times a state remembers (and each run's progress `changed_at`).
WALL_TIMES = ("checked_at", "idle_since", "stop_at", "last_busy_at", "stop_requested_at")
# /proc/uptime has 10 ms resolution and is read apart from the wall clock: a smaller
# difference between the two clocks is noise, not a step.
CLOCK_STEP_SECONDS = 1.0


def rebased(previous: dict, *, now: float, uptime: float | None, boot_id: str) -> dict:
    """`previous` with its times moved by as far as the wall clock stepped since it was
    saved, measured against the boot's own clock (uptime), which never steps.

    NTP or a person may step the wall clock by minutes or hours: without this, a step
    back looked like a state from the future and a step forward like a long silence, and
    either restarted the countdown. Unchanged where either uptime is unknown, or the
    state is from another boot.
    """
    saved_uptime, checked_at = previous.get("checked_uptime"), previous.get("checked_at")
    if uptime is None or previous.get("boot_id") != boot_id:
        return previous
    if not _is_number(saved_uptime) or not _is_number(checked_at):
        return previous
    step = (now - checked_at) - (uptime - saved_uptime)
    if abs(step) < CLOCK_STEP_SECONDS:
        return previous
    moved = {key: previous[key] + step for key in WALL_TIMES if _is_number(previous.get(key))}
    progress = previous.get("progress")
    if isinstance(progress, dict):
        moved["progress"] = {
            key: {**seen, "changed_at": seen["changed_at"] + step}
            if isinstance(seen, dict) and _is_number(seen.get("changed_at"))
            else seen
            for key, seen in progress.items()
        }
    return {**previous, **moved}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def carried_state(previous: dict, *, boot_id: str, now: float) -> dict:
    """The part of the previous state that still counts: same boot, recent enough."""
    if previous.get("version") != STATE_VERSION or previous.get("boot_id") != boot_id:
        return {}
    checked_at = previous.get("checked_at")
    if not isinstance(checked_at, (int, float)) or not 0 <= now - checked_at <= STALE_STATE_SECONDS:
        return {}
    return previous


def track_progress(jobs: list[Trainer | Preparation | Sweep], memory: dict, now: float) -> dict:
    """Per run (or preparation, by its key): the step last seen and when it last moved
    (None: not seen moving).

    A run shows progress by its step advancing (its updated_at where it reports no
    step), not by GPU use: a hung collective or a dead loop keeps a GPU at 100 %.
    """
    progress = {}
    for job in jobs:
        marker = job.step if job.step is not None else job.updated_at
        seen = memory.get(job.key)
        if not isinstance(seen, dict):
            changed_at = job.updated_at  # first look: the file's own time, if plausible
        elif seen.get("marker") == marker:
            changed_at = seen.get("changed_at")
        else:
            changed_at = now
        progress[job.key] = {"marker": marker, "changed_at": changed_at}
    return progress


def decide(
    config: WatchdogConfig,
    signals: Signals,
    previous: dict,
    *,
    now: float,
    uptime: float | None,
    boot_id: str,
) -> dict:
    """The new state from the last one (`rebased` first); `decision` is `busy`, `idle` or
    `stop`."""
    previous = carried_state(previous, boot_id=boot_id, now=now)
    # A finished run's container that only retries its uploads is no work: the countdown
    # runs (the resume unit's retries fit in it, and the next boot retries again), or
    # storage that stays down would keep the box up for every retry.
    trainers = [trainer for trainer in signals.trainers if not trainer.uploading]
    jobs = [*trainers, *signals.preparations, *signals.sweeps]
    progress = track_progress(jobs, previous.get("progress") or {}, now)
    hung_limit_seconds = config.hung_trainer_minutes * 60
    live, hung = [], []
    for job in jobs:
        # A fresh start gets the hung limit to show its first step (data loading,
        # checkpoint download); after that only progress counts.
        progress_at = max(job.started_at, progress[job.key]["changed_at"] or 0)
        (live if now - progress_at < hung_limit_seconds else hung).append(job)
    hung_runs = [job.run_id for job in hung if isinstance(job, Trainer)]

    reasons = []
    if signals.ssh_sessions:
        reasons.append("ssh")
    if signals.leases:
        reasons.append("lease")
    if any(isinstance(job, Trainer) for job in live):
        reasons.append("trainer")
    if any(isinstance(job, Preparation) for job in live):
        reasons.append("preparation")
    if any(isinstance(job, Sweep) for job in live):
        reasons.append("sweep")
    # A hung run's spinning GPU is not work; a GPU busy with no run of ours is.
    if max(signals.gpu_utilization or [0]) >= config.gpu_busy_percent and not hung_runs:
        reasons.append("gpu")

    idle_since = None if reasons else previous.get("idle_since") or now
    stop_at = None if reasons else idle_since + config.idle_shutdown_minutes * 60
    decision = "busy" if reasons else ("stop" if now >= stop_at else "idle")
    pending_stop = {key: previous.get(key) for key in STOP_KEYS} if decision == "stop" else {}
    return {
        "version": STATE_VERSION,
        "boot_id": boot_id,
        "checked_at": now,
        "checked_uptime": uptime,
        "decision": decision,
        "busy_reasons": sorted(reasons),
        "hung_run_ids": sorted(hung_runs),
        "hung_preparations": sorted(job.name for job in hung if isinstance(job, Preparation)),
        "hung_sweeps": sorted(job.name for job in hung if isinstance(job, Sweep)),
        "idle_since": idle_since,
        "stop_at": stop_at,
        "last_busy_at": now if reasons else previous.get("last_busy_at"),
        "idle_shutdown_minutes": config.idle_shutdown_minutes,
        "hung_trainer_minutes": config.hung_trainer_minutes,
        "progress": progress,
        **{key: pending_stop.get(key) for key in STOP_KEYS},
        "signals": signals.as_json(),
    }


def fail_closed(
    state: dict, previous: dict, *, config: WatchdogConfig, now: float, boot_time: float | None
) -> dict:
    """The state to act on when it could not be saved.

    The countdown cannot reach the next minute, so it runs from the last busy moment
    on record, or from the boot: an unwritable state file stops the box early, never
    keeps it up.
    """
    if state["decision"] == "busy":
        return state
    same_boot = previous.get("boot_id") == state["boot_id"]
    last_busy = previous.get("last_busy_at") if same_boot else None
    if isinstance(last_busy, (int, float)) and last_busy <= now:
        since = last_busy
    else:
        since = boot_time or 0.0
    idle_since = min(state["idle_since"], since)
    stop_at = idle_since + config.idle_shutdown_minutes * 60
    decision = "stop" if now >= stop_at else "idle"
    return {**state, "idle_since": idle_since, "stop_at": stop_at, "decision": decision}


def stop_backoff_seconds(failures: int) -> float:
    if failures <= 0:
        return STOP_RETRY_SECONDS
    return min(60.0 * 2 ** (failures - 1), MAX_STOP_BACKOFF_SECONDS)


def should_request_stop(state: dict, *, now: float) -> bool:
    requested = state.get("stop_requested_at")
    if state["decision"] != "stop":
        return False
    if requested is None:
        return True
    wait = stop_backoff_seconds(state.get("stop_failures") or 0)
    if state.get("stop_accepted"):  # it may be taking effect: not asked again sooner
        wait = max(wait, STOP_RETRY_SECONDS)
    return now - requested >= wait
