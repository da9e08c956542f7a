#!/usr/bin/env python3
"""Idle watchdog: one look at the box per run; a systemd timer runs it every minute.

Busy = a trainer container is running (and not hung), a GPU is working, or a
person has an interactive SSH session. After `idle_shutdown_minutes` of idleness
in a row it stops billing (billing_stop.py). Every decision goes to stdout (the
journal: `journalctl -u glucose-watchdog`) with the signals it saw, and to
BOX_ROOT/watchdog/state.json, which carries the idle-since time across runs and
which `fab status` reads for the countdown.

Settings: $GLUCOSE_WATCHDOG_CONFIG (default /etc/glucose-training/watchdog.json).
$GLUCOSE_WATCHDOG_NOW (unix seconds) replaces the clock, for tests.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from billing_stop import stop_billing
from busy_signals import read_signals
from gpu_metric import publish_gpu_utilization
from idle_decision import decide, should_request_stop
from watchdog_config import load_config_or_say_why

CLOCK_ENV = "GLUCOSE_WATCHDOG_NOW"


def log(message: str) -> None:
    print(f"glucose-watchdog: {message}", flush=True)


def now_seconds() -> float:
    fake = os.environ.get(CLOCK_ENV)
    return float(fake) if fake else time.time()


def read_boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unknown"


def load_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log(f"WARNING: ignoring unreadable state {path}: {error}")
        return {}
    return state if isinstance(state, dict) else {}


def save_state(path: Path, state: dict) -> None:
    # Atomic: `fab status` may read it at any moment.
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    partial.chmod(0o644)
    os.replace(partial, path)


def describe(state: dict, now: float) -> str:
    signals = state["signals"]
    parts = [f"decision={state['decision']}"]
    if state["busy_reasons"]:
        parts.append(f"busy={','.join(state['busy_reasons'])}")
    else:
        parts.append(f"idle_for={now - state['idle_since']:.0f}s")
        parts.append(f"stop_in={max(0.0, state['stop_at'] - now):.0f}s")
    if state["hung_run_ids"]:
        parts.append(f"hung={','.join(state['hung_run_ids'])}")
    parts.append(f"gpu={json.dumps(signals['gpu_utilization'])}")
    parts.append(f"trainers={json.dumps([t['run_id'] for t in signals['trainers']])}")
    parts.append(f"ssh={json.dumps(signals['ssh_sessions'])}")
    if signals["problems"]:
        parts.append(f"problems={json.dumps(signals['problems'])}")
    return " ".join(parts)


def main() -> int:
    config = load_config_or_say_why("glucose-watchdog")
    if config is None:
        return 2
    now = now_seconds()
    state = decide(
        config,
        read_signals(config),
        load_state(config.state_path),
        now=now,
        boot_id=read_boot_id(config.boot_id_path),
    )
    log(describe(state, now))
    publish_gpu_utilization(config, state["signals"]["gpu_utilization"], log)
    if should_request_stop(state, now=now):
        log(f"idle past the limit: stopping billing ({config.cloud})")
        # Saved first: an OS shutdown may end this process before it returns.
        state["stop_requested_at"] = now
        save_state(config.state_path, state)
        state["stop_method"] = stop_billing(config, log)
    save_state(config.state_path, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
