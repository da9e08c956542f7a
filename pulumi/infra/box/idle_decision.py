"""The watchdog's decision: busy, idle (and for how long), or time to stop billing.

A pure function of the signals, the previous state and the time, so every rule
reads in one place. The state it returns is what `watchdog/state.json` holds and
what `fab status` shows as the countdown. Standard library only.
"""

from __future__ import annotations

from busy_signals import Signals
from watchdog_config import WatchdogConfig

STATE_VERSION = 1
# The timer looks every minute; a longer silence means the watchdog was not
# running (stopped by hand, box suspended), so nobody can say the box was idle
# all that time and the countdown starts over rather than firing at once.
STALE_STATE_SECONDS = 10 * 60
# A stop already requested is not repeated every minute while it takes effect.
STOP_RETRY_SECONDS = 5 * 60


def carried_state(previous: dict, *, boot_id: str, now: float) -> dict:
    """The part of the previous state that still counts: same boot, recent enough."""
    if previous.get("version") != STATE_VERSION or previous.get("boot_id") != boot_id:
        return {}
    checked_at = previous.get("checked_at")
    if not isinstance(checked_at, (int, float)) or not 0 <= now - checked_at <= STALE_STATE_SECONDS:
        return {}
    return previous


def decide(
    config: WatchdogConfig, signals: Signals, previous: dict, *, now: float, boot_id: str
) -> dict:
    """The new state; `decision` is `busy`, `idle` or `stop`."""
    previous = carried_state(previous, boot_id=boot_id, now=now)
    gpu_busy = max(signals.gpu_utilization or [0]) >= config.gpu_busy_percent
    gpu_idle_since = None if gpu_busy else previous.get("gpu_idle_since") or now

    reasons = []
    if signals.ssh_sessions:
        reasons.append("ssh")
    if gpu_busy:
        reasons.append("gpu")
    hung_limit_seconds = config.hung_trainer_minutes * 60
    hung_since = None
    for trainer in signals.trainers:
        # A trainer shows life by keeping the GPU busy or by writing checkpoints.
        progress_at = max(
            gpu_idle_since or now, trainer.last_checkpoint_at or 0, trainer.started_at
        )
        if now - progress_at < hung_limit_seconds:
            reasons.append("trainer")
            break
        hung_since = max(hung_since or 0, progress_at)

    if reasons:
        idle_since, stop_at = None, None
    elif hung_since is not None:
        # The hung trainer already sat out its longer limit: idle since it stalled.
        idle_since, stop_at = hung_since, hung_since + hung_limit_seconds
    else:
        idle_since = previous.get("idle_since") or now
        stop_at = idle_since + config.idle_shutdown_minutes * 60

    hung = hung_since is not None and not reasons
    hung_run_ids = sorted(trainer.run_id for trainer in signals.trainers) if hung else []
    decision = "busy" if reasons else ("stop" if now >= stop_at else "idle")
    stop_requested_at = previous.get("stop_requested_at") if decision == "stop" else None
    return {
        "version": STATE_VERSION,
        "boot_id": boot_id,
        "checked_at": now,
        "decision": decision,
        "busy_reasons": sorted(set(reasons)),
        "hung_run_ids": hung_run_ids,
        "idle_since": idle_since,
        "gpu_idle_since": gpu_idle_since,
        "stop_at": stop_at,
        "idle_shutdown_minutes": config.idle_shutdown_minutes,
        "hung_trainer_minutes": config.hung_trainer_minutes,
        "stop_requested_at": stop_requested_at,
        "stop_method": previous.get("stop_method") if stop_requested_at else None,
        "signals": signals.as_json(),
    }


def should_request_stop(state: dict, *, now: float) -> bool:
    requested = state.get("stop_requested_at")
    return state["decision"] == "stop" and (
        requested is None or now - requested >= STOP_RETRY_SECONDS
    )
