#!/usr/bin/env python3
"""Idle watchdog: one look at the box per run; a systemd timer runs it every minute.

Busy = a trainer container (or a `fab prepare-data` one) is running and making
progress, a GPU is working (without a hung run to blame), a person has an
interactive SSH session, or a lease from `fab train` / `fab hold` is running. After
`idle_shutdown_minutes` of idleness in a row it stops billing (billing_stop.py), after
writing why (stop_records.py) and telling the end of a run it stops because it hung
(notify.py).
Every decision goes to stdout (the journal: `journalctl -u glucose-watchdog`) with
the signals it saw, and to the state file (config `state_path`, on /run), which
carries the countdown across runs and which `fab status` reads.

It fails closed: a state file it cannot write makes it count from the last busy
moment on record; a signal it cannot read never counts as busy; every command,
request and file write it makes has a time limit (a stalled disk delays a stop by
seconds, never holds it up), and their sum fits its unit's TimeoutStartSec.

`watchdog.py --explain` prints the decision it would take now, as JSON, and acts
on nothing. Settings: $GLUCOSE_WATCHDOG_CONFIG (default
/etc/glucose-training/watchdog.json); $GLUCOSE_WATCHDOG_NOW (unix seconds) and
$GLUCOSE_WATCHDOG_UPTIME (seconds since the boot) replace the clocks, for tests.
Standard library only, Python 3.10+ (contract.MIN_PYTHON).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from box import (
    billing_stop,
    bounded_command,
    bounded_write,
    busy_signals,
    contract,
    docker_cli,
    notify,
    stop_records,
    verdict_metric,
)
from box.box_time import boot_time, now_seconds, read_boot_id, uptime_seconds
from box.idle_decision import (
    decide,
    fail_closed,
    rebased,
    should_request_stop,
    stop_backoff_seconds,
)
from box.watchdog_config import MAX_HTTP_TIMEOUT_SECONDS, WatchdogConfig, load_config_or_say_why

REAP = bounded_command.REAP_SECONDS
# One deadline per request, its answer's body included (box/bounded_post.call).
HTTP_WORST_SECONDS = MAX_HTTP_TIMEOUT_SECONDS
# The link for `fab`, three saves of the state and the stop record, each bounded.
FILE_WRITES = 5
WORST_CASE_SECONDS = (
    busy_signals.NVIDIA_SMI_TIMEOUT_SECONDS + REAP
    + 2 * (docker_cli.DOCKER_TIMEOUT_SECONDS + REAP)  # ps, inspect
    + verdict_metric.IMDS_REQUESTS * HTTP_WORST_SECONDS
    + verdict_metric.AWS_CLI_TIMEOUT_SECONDS + REAP
    + max(
        billing_stop.AZURE_REQUESTS * HTTP_WORST_SECONDS,
        billing_stop.SHUTDOWN_TIMEOUT_SECONDS + REAP,
    )
    + FILE_WRITES * bounded_write.WRITE_TIMEOUT_SECONDS
    + notify.WORST_CASE_SECONDS
)  # fmt: skip


def log(message: str) -> None:
    print(f"glucose-watchdog: {message}", flush=True)


def load_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log(f"WARNING: ignoring unreadable state {path}: {error}")
        return {}
    return state if isinstance(state, dict) else {}


def save_state(path: Path, state: dict) -> bool:
    """Write atomically (`fab status` may read it at any moment), waiting for the disk a
    bounded time; False when it failed."""
    partial = path.with_name(path.name + ".tmp")
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(text)
        partial.chmod(0o644)
        os.replace(partial, path)

    try:
        bounded_write.write_within(write)
    except OSError as error:
        log(f"ERROR: cannot save the countdown in {path} ({error}): failing closed")
        return False
    return True


def link_state_for_fab(config: WatchdogConfig) -> None:
    """`fab status` reads BOX_ROOT/watchdog/state.json: keep it a link to the state."""
    link = Path(config.box_root) / contract.WATCHDOG_DIR / "state.json"
    if Path(config.state_path) == link:  # a box_root seam may keep the state there
        return
    try:
        if os.readlink(link) == config.state_path:
            return
    except OSError:
        pass  # missing, or a file from before the state moved to /run
    partial = link.with_name("state.json.link")

    def write() -> None:
        if os.path.lexists(partial):
            os.unlink(partial)
        os.symlink(config.state_path, partial)
        os.replace(partial, link)

    try:
        bounded_write.write_within(write)
    except OSError as error:
        log(f"WARNING: cannot link {link} to the state: {error}")


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
    if signals["preparations"]:
        parts.append(f"preparations={json.dumps([p['name'] for p in signals['preparations']])}")
    parts.append(f"ssh={json.dumps(signals['ssh_sessions'])}")
    if signals["leases"]:
        parts.append(f"leases={json.dumps([lease['name'] for lease in signals['leases']])}")
    if signals["problems"]:
        parts.append(f"problems={json.dumps(signals['problems'])}")
    return " ".join(parts)


def tell_hung_runs(config: WatchdogConfig, state: dict, now: float) -> None:
    """The runs and sweeps this stop ends (they hung), each told once (box/notify.py),
    all within notify.BUDGET_SECONDS. Asked at every stop request: a message a stop that
    failed went without is tried again with the next."""
    give_up = time.monotonic() + notify.BUDGET_SECONDS
    minutes = state["hung_trainer_minutes"]
    hung = [(config.runs_dir, run_id) for run_id in state["hung_run_ids"]]
    hung += [(config.sweeps_dir, sweep_id) for sweep_id in state.get("hung_sweeps") or ()]
    for home, name in hung:
        end = f"stopped by the idle watchdog (no progress for {minutes} min)"
        text = notify.summary_line(config, home, name, end, now)
        notify.notify_once(config, f"hung:{name}@{state['boot_id']}", text, log, give_up)


def request_stop(config: WatchdogConfig, state: dict, now: float) -> None:
    """Ask the cloud (or the OS) to stop the bill; `state` says how that went.

    `stop_failures` counts the attempts in a row that did not stop the bill: refused,
    left without the cloud's answer, or accepted while this box still runs
    STOP_RETRY_SECONDS later. Any of them is STILL BILLED (the log, `fab status`)."""
    log(f"idle past the limit: stopping billing ({config.cloud})")
    failures, still_up = state.get("stop_failures") or 0, None
    if state.get("stop_accepted"):
        failures += 1
        minutes = (now - state["stop_requested_at"]) / 60
        still_up = f"a stop accepted {minutes:.0f} min ago has not stopped the box"
        log(f"STILL BILLED: {still_up}; asking again")
    state["stop_requested_at"] = now
    if not state.get("stop_recorded"):
        stop_records.append(config, stop_records.watchdog_record(state, now), log)
        state["stop_recorded"] = True
    tell_hung_runs(config, state, now)
    # Saved first, this attempt counted as failed until the answer says otherwise: an OS
    # shutdown, or systemd's limit, may end this process before it returns.
    unanswered = f"no answer to stop attempt {failures + 1}: the watchdog ended before it came"
    state.update(stop_failures=failures + 1, stop_accepted=False, stop_error=unanswered)
    save_state(Path(config.state_path), state)
    result = billing_stop.stop_billing(config, log)
    state["stop_method"] = result.method
    if not result.error:
        # Accepted; an earlier accepted stop that did not take keeps the box STILL BILLED.
        kept = failures if still_up else 0
        state.update(stop_failures=kept, stop_accepted=True, stop_error=still_up)
        return
    failures += 1
    state.update(stop_failures=failures, stop_error=result.error)
    retry_minutes = stop_backoff_seconds(failures) / 60
    log(f"STILL BILLED: stop attempt {failures} failed; next one in {retry_minutes:.0f} min")


def main(argv: list[str]) -> int:
    config = load_config_or_say_why("glucose-watchdog")
    if config is None:
        return 2
    now, uptime = now_seconds(), uptime_seconds(config.proc_root)
    boot_id = read_boot_id(config.boot_id_path)
    state_path = Path(config.state_path)
    previous = rebased(load_state(state_path), now=now, uptime=uptime, boot_id=boot_id)
    signals = busy_signals.read_signals(config, now)
    state = decide(config, signals, previous, now=now, uptime=uptime, boot_id=boot_id)
    if "--explain" in argv:
        state["would_request_stop"] = should_request_stop(state, now=now)
        print(json.dumps(state, indent=2, sort_keys=True))
        return 0
    booted = boot_time(config.proc_root)
    link_state_for_fab(config)
    if not save_state(state_path, state):
        state = fail_closed(state, previous, config=config, now=now, boot_time=booted)
    log(describe(state, now))
    value = verdict_metric.verdict_value(state["decision"], now=now, boot_time=booted)
    verdict_metric.publish_verdict(config, value, log)
    if should_request_stop(state, now=now):
        request_stop(config, state, now)
        save_state(state_path, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
