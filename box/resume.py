#!/usr/bin/env python3
"""Resume unit: the one thing on the box that starts a trainer container again (and a
`fab sweep` driver's, judged the same way from its folder under sweeps/).

Trainer containers run with docker's `--restart no`: docker's own policies restart
a crash loop forever and bring user-stopped runs back at the next daemon start.
This program decides instead; it runs at boot (glucose-resume.service) and every
minute (glucose-resume.timer) and starts every trainer container again (`docker
start`: runs on the box at once all come back) only when it was interrupted:

- it exited 75 (a checkpoint was uploaded: a spot notice, or a docker restart
  stopped it), or 69 (a box of a multi-node run met the others not in time: one of
  them is away, evicted; started again a minute apart until the run's deadline, not
  counted against the bound below, so the run comes back whenever its last box does,
  but for at most `peer_wait_minutes` in a boot: then it stays down and the idle
  watchdog stops the box), or
- it was started before this boot and its status.json still says running or
  preempted (the host went down under it), or
  (on a box of a multi-node run without rank 0: its heartbeat.json says so), or
- it finished but its status says `finished-upload-pending`: the start only
  uploads what storage lacked and exits 0.

Never: a run stopped by the user (`fab stop` writes runs/<id>/STOPPED_BY_USER),
one that finished (exit 0), one that failed (exit 2 is a user error; anything else
a crash), nor one past its deadline (launch.json's `deadline`: the cloud's hard stop is
then, so a box the cloud brought back late idles into its stop instead of training).
At most RETRY_DELAYS_SECONDS' length starts per run and boot, the later ones after a
pause, counted in the config's `resume_state_path` (on /run, so a boot
starts the count over).

A run that stays down for good (finished, failed, past its deadline; not one the user
stopped) is told once to the stack's webhook and topic (notify.py), after every run
that comes back has been started: a webhook that is slow or down never holds up a
start, and all the telling of one look fits in TELLS_BUDGET_SECONDS (ends left over are
told at the next look).

A run that failed for good (any exit but 0, 75 or 69) gets its end in its folder in
the stack's storage where its trainer stored none (killed before its first upload,
`fab runs` listed it `launched`): box/stored_end.py writes status.json there, state
failed with the exit code, never over an end the trainer stored. All the storing of
one look fits in STORES_BUDGET_SECONDS, before the telling; a store that failed is
tried again at the next look.

Settings: $GLUCOSE_WATCHDOG_CONFIG (the watchdog's). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from box import contract, docker_cli, notify, stored_end, user_files
from box.box_time import boot_time, now_seconds, read_boot_id
from box.watchdog_config import WatchdogConfig, load_config_or_say_why

DOCKER_POLL_SECONDS = 2
# Pause before the 1st, 2nd and 3rd start of a run in one boot, after its last exit.
RETRY_DELAYS_SECONDS = (0, 60, 180)
# Pause before starting again a run whose boxes did not meet (exit 69).
BOXES_AWAY_RETRY_SECONDS = 60
STOPPED_BY_USER_REASON = "stopped by the user"
TELLS_BUDGET_SECONDS = 60
"""All the ends one look tells, each within notify.BUDGET_SECONDS: the unit's 300 s
(TimeoutStartSec) hold the docker wait, the starts, these and STORES_BUDGET_SECONDS."""
STORES_BUDGET_SECONDS = 20
"""All the ends one look stores (store_ends), each within stored_end.STORE_SECONDS."""
PAST_DEADLINE_REASON = "past its deadline"


# An end is told (and stored) only when first seen within a day of it. The unit looks
# every minute the box is up, so a real end is seen within minutes (or at the next
# boot); without the bound, the first look of programs that judge every container (not
# just the newest) would tell every old run's end on the box at once.
TELL_ENDS_WITHIN_SECONDS = 24 * 3600


def log(message: str) -> None:
    print(f"glucose-resume: {message}", flush=True)


def why_not_resume(
    container: docker_cli.TrainerContainer, run_dir: Path, booted_at: float | None, now: float
) -> str:
    """Empty when the container should be started again, else the reason it stays down."""
    if os.path.lexists(run_dir / contract.STOPPED_BY_USER):
        return STOPPED_BY_USER_REASON
    status = contract.RunRecord.from_dict(
        user_files.read_json(run_dir.parent, run_dir.name, contract.STATUS_FILE)
        or user_files.read_json(run_dir.parent, run_dir.name, contract.HEARTBEAT_FILE)
    )
    state = status.state or ""
    if state == contract.STATE_UPLOAD_PENDING:
        # Its last uploads did not land: a start only uploads them
        # (trainer/checkpoints/final_upload.py) and exits 0, whatever the hour.
        return ""
    deadline = run_deadline(run_dir)
    if deadline is not None and now >= deadline:
        return f"{PAST_DEADLINE_REASON} (`fab train --run ID --hours H` gives it another)"
    if state == contract.STATE_FINISHED or container.exit_code == contract.EXIT_FINISHED:
        return "finished"
    if container.exit_code == contract.EXIT_USER_ERROR:
        return "exited 2: a user error (bad flags or data), not an interruption"
    if container.exit_code in (contract.EXIT_STOPPED, contract.EXIT_BOXES_AWAY):
        return ""
    # Without a boot time to compare, trust the status alone (the attempts stay bounded).
    before_boot = booted_at is None or container.started_at < booted_at
    # The trainer never got to write its final state: the host went down under it.
    if state in contract.RECOVERED_FROM and before_boot:
        return ""
    return f"exited {container.exit_code} with status {state or 'unknown'}: a failure"


def run_deadline(run_dir: Path) -> float | None:
    """launch.json's deadline (unix seconds), None when it names none."""
    launch = user_files.read_json(run_dir.parent, run_dir.name, contract.LAUNCH_FILE)
    deadline = contract.LaunchRecord.from_dict(launch).deadline
    return float(deadline) if deadline is not None else None


def load_attempts(path: Path, boot_id: str) -> dict:
    try:
        attempts = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(attempts, dict) or attempts.get("boot_id") != boot_id:
        return {}
    runs = attempts.get("runs")
    return runs if isinstance(runs, dict) else {}


def save_attempts(path: Path, boot_id: str, runs: dict) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"boot_id": boot_id, "runs": runs}) + "\n")
    except OSError as error:
        log(f"ERROR: cannot count resume attempts in {path}: {error}")
        return False
    return True


def wait_for_docker(command: str, wait_seconds: int) -> bool:
    deadline = time.monotonic() + wait_seconds
    while not docker_cli.is_up(command):
        if time.monotonic() >= deadline:
            return False
        time.sleep(DOCKER_POLL_SECONDS)
    return True


def resume(config: WatchdogConfig) -> int:
    if not wait_for_docker(config.docker_command, config.docker_wait_seconds):
        log(f"ERROR: docker did not answer within {config.docker_wait_seconds}s; nothing resumed")
        return 1
    containers = docker_cli.list_trainers(config.docker_command, include_stopped=True)
    if not containers:
        log("no trainer containers: nothing to resume")
    # Every run, not just the newest: runs on the box at once were interrupted at once (an
    # eviction, a reboot), and each comes back. A run has one container (its name), so
    # each is judged, and started, once.
    ends: list[End] = []
    codes = [resume_one(config, container, config.runs_dir, ends) for container in containers]
    sweeps = docker_cli.list_containers(
        config.docker_command, include_stopped=True, label=contract.SWEEP_LABEL
    )
    # A sweep's driver is judged as a run is: its folder holds the same status.json
    # keys and the user's stop marker.
    sweeps = [container for container in sweeps if container.kind == "sweep"]
    codes += [resume_one(config, sweep, config.sweeps_dir, ends) for sweep in sweeps]
    store_ends(config, ends)
    tell_ends(config, ends)
    return max(codes, default=0)


End = tuple[docker_cli.TrainerContainer, Path, str]
"""A container whose run stays down, its home (runs/ or sweeps/) and what it did."""


def tell_ends(config: WatchdogConfig, ends: list[End]) -> None:
    """Tell each end once, all within TELLS_BUDGET_SECONDS."""
    give_up = time.monotonic() + TELLS_BUDGET_SECONDS
    for container, home, state in ends:
        if time.monotonic() >= give_up:
            log(
                f"the end of {container.run_id} is told at the next look: this one has no time left"
            )
            continue
        own = min(give_up, time.monotonic() + notify.BUDGET_SECONDS)
        tell_the_end(config, container, home, state, give_up_at=own)


def store_ends(config: WatchdogConfig, ends: list[End]) -> None:
    """Store each failed end its trainer did not, all within STORES_BUDGET_SECONDS."""
    give_up = time.monotonic() + STORES_BUDGET_SECONDS
    for container, home, _ in ends:
        if time.monotonic() >= give_up:
            log(f"run {container.run_id}: its end is stored at the next look (no time left)")
            continue
        own = min(give_up, time.monotonic() + stored_end.STORE_SECONDS)
        store_the_end(config, container, home, give_up_at=own)


def resume_one(
    config: WatchdogConfig, container: docker_cli.TrainerContainer, home: Path, ends: list[End]
) -> int:
    """Start `container` again if it was interrupted; `home` holds its folder (runs/ or
    sweeps/). A run that stays down for good goes into `ends`, to be told after the
    starts."""
    what = f"{'sweep' if container.kind == 'sweep' else 'run'} {container.run_id}"
    if container.running:
        log(f"{what} is running ({container.name})")
        return 0
    run_dir = home / container.run_id
    reason = why_not_resume(container, run_dir, boot_time(config.proc_root), now_seconds())
    if reason:
        log(f"{what} stays down: {reason}")
        if state := end_state(container, reason):
            ends.append((container, home, state))
        return 0
    if container.exit_code == contract.EXIT_BOXES_AWAY and run_deadline(run_dir) is not None:
        return start_when_boxes_may_be_back(config, container)
    return start_within_bounds(config, container)


def end_state(container: docker_cli.TrainerContainer, reason: str) -> str | None:
    """What the message of a run that stays down for `reason` says it did; None for an
    end not told: the user stopped it, and knows."""
    if reason == STOPPED_BY_USER_REASON:
        return None
    if container.exit_code == contract.EXIT_FINISHED:
        return "finished"
    if reason.startswith(PAST_DEADLINE_REASON):
        return "missed its deadline"
    return f"failed (exit {container.exit_code})"


def tell_the_end(
    config: WatchdogConfig,
    container: docker_cli.TrainerContainer,
    home: Path,
    state: str,
    say: Callable[[str], None] = log,
    give_up_at: float | None = None,
) -> bool:
    """One message (box/notify.py) for the end of this container's run: it `state`;
    `say` logs what was sent (the caller's journal). Whether nothing is left to try."""
    if not is_this_boxs_end(container, home):
        return True
    key = f"{container.id}@{container.finished_at:.0f}"
    text = notify.summary_line(config, home, container.run_id, state, now_seconds())
    return notify.notify_once(config, key, text, say, give_up_at)


def store_the_end(
    config: WatchdogConfig,
    container: docker_cli.TrainerContainer,
    home: Path,
    say: Callable[[str], None] = log,
    give_up_at: float | None = None,
) -> bool:
    """A run that failed for good (not a sweep: its driver's folder is its own) gets its
    end in its folder in storage where its trainer stored none (box/stored_end.py): the
    run's last status.json here, failed with the container's exit code, as it exited.
    Whether nothing is left to try."""
    if home != config.runs_dir or not stored_end.is_failure(container.exit_code):
        return True
    if not is_this_boxs_end(container, home):
        return True
    last = user_files.read_json(home, container.run_id, contract.STATUS_FILE) or {}
    record = {
        **last,
        "run_id": container.run_id,
        "state": contract.STATE_FAILED,
        "exit_code": container.exit_code,
        "updated_at": container.finished_at,
    }
    return stored_end.store(config, container.run_id, record, say, give_up_at)


def is_this_boxs_end(container: docker_cli.TrainerContainer, home: Path) -> bool:
    """Whether this box reports the end of the container's run (tells it, stores it): not
    one first seen over a day after it (TELL_ENDS_WITHIN_SECONDS), nor one of a box of
    workers of a multi-node run (it has a heartbeat and no status: rank 0's box reports)."""
    if now_seconds() - container.finished_at > TELL_ENDS_WITHIN_SECONDS:
        return False
    run_dir = home / container.run_id
    no_status = not (run_dir / contract.STATUS_FILE).exists()
    return not (no_status and (run_dir / contract.HEARTBEAT_FILE).exists())


def start_when_boxes_may_be_back(
    config: WatchdogConfig, container: docker_cli.TrainerContainer
) -> int:
    """A run whose boxes did not meet starts again a minute after its last try, as
    often as it takes until its deadline (why_not_resume ends it there)."""
    waited = now_seconds() - peers_away_since(config, container)
    if waited >= config.peer_wait_minutes * 60:
        log(
            f"run {container.run_id} stays down: its other boxes did not meet for "
            f"{waited / 60:.0f} min (peerWaitMinutes {config.peer_wait_minutes}); the box "
            "idles into its stop instead of billing until the run's deadline"
        )
        return 0
    wait = round(container.finished_at + BOXES_AWAY_RETRY_SECONDS - now_seconds())
    if wait > 0:
        log(f"run {container.run_id}: its other boxes are away; trying again in {wait:.0f}s")
        return 0
    log(f"starting run {container.run_id} again: its boxes may all be back")
    docker_cli.start(config.docker_command, container.id)
    return 0


def peers_away_since(config: WatchdogConfig, container: docker_cli.TrainerContainer) -> float:
    """When, in this boot, the run's present outage began: the first exit 69 since the
    boxes last trained together (its step moved on since the outage was recorded: a
    second outage in one boot counts from its own start, not the first's). The count is
    on /run, so a boot starts it over."""
    boot_id = read_boot_id(config.boot_id_path)
    path = Path(config.resume_state_path)
    runs = load_attempts(path, boot_id)
    entry = runs.get(container.key) or {}
    since, at_step = entry.get("peers_away_since"), entry.get("peers_away_at_step")
    step = _run_step(config, container)
    trained_since = step is not None and (not _is_number(at_step) or step > at_step)
    if _is_number(since) and not trained_since:
        return float(since)
    runs[container.key] = {
        **entry,
        "peers_away_since": container.finished_at,
        "peers_away_at_step": step,
    }
    save_attempts(path, boot_id, runs)
    return container.finished_at


def _run_step(config: WatchdogConfig, container: docker_cli.TrainerContainer) -> int | None:
    """The step the run's record (status.json, else heartbeat.json) has reached."""
    for name in (contract.STATUS_FILE, contract.HEARTBEAT_FILE):
        record = contract.RunRecord.from_dict(
            user_files.read_json(config.runs_dir, container.run_id, name)
        )
        if record.step is not None:
            return record.step
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def start_within_bounds(config: WatchdogConfig, container: docker_cli.TrainerContainer) -> int:
    boot_id = read_boot_id(config.boot_id_path)
    path = Path(config.resume_state_path)
    runs = load_attempts(path, boot_id)
    done = int((runs.get(container.key) or {}).get("attempts") or 0)
    if done >= len(RETRY_DELAYS_SECONDS):
        log(f"run {container.run_id} stays down: started {done} times in this boot already")
        return 0
    wait = round(container.finished_at + RETRY_DELAYS_SECONDS[done] - now_seconds())
    if wait > 0:
        log(f"run {container.run_id}: start {done + 1} in {wait:.0f}s")
        return 0
    runs[container.key] = {"attempts": done + 1, "last_at": now_seconds()}
    if not save_attempts(path, boot_id, runs):
        log(f"run {container.run_id} stays down: an uncounted start could repeat forever")
        return 1
    log(
        f"starting run {container.run_id} again ({container.name}, exit {container.exit_code}; "
        f"start {done + 1} of {len(RETRY_DELAYS_SECONDS)} in this boot)"
    )
    docker_cli.start(config.docker_command, container.id)
    return 0


def main() -> int:
    config = load_config_or_say_why("glucose-resume")
    if config is None:
        return 2
    try:
        return resume(config)
    except docker_cli.DockerError as error:
        log(f"ERROR: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
