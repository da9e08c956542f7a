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
- its trainer said it finished but its last uploads are not known to have landed
  (box/unfinished_uploads.py): its status says `finished-upload-pending` (storage was
  down at the end, or it was killed during those uploads: exit 137), or `finished` with
  an exit other than 0. The start only uploads what storage lacks, or finishes the run
  again from its last checkpoint, and exits 0, whatever the hour.

Never: a run stopped by the user (`fab stop` writes runs/<id>/STOPPED_BY_USER),
one that finished (exit 0), one that failed (exit 2 is a user error; anything else
a crash), nor one past its deadline (launch.json's `deadline`: the cloud's hard stop is
then, so a box the cloud brought back late idles into its stop instead of training).
At most RETRY_DELAYS_SECONDS' length starts per run and boot, the later ones after a
pause, counted in the config's `resume_state_path` (on /run, so a boot
starts the count over).

A run that stays down for good (finished, failed, past its deadline, or finished with
uploads that did not land once its starts are spent; not one the user stopped) has its
end stored where its trainer could not and told once (box/run_ends.py), after every run
that comes back has been started: a store or a webhook that is slow or down never holds
up a start. A failed run's end in storage is `failed` with the exit code (killed before
its first upload, `fab runs` listed it `launched`), never over an end the trainer
stored; a run whose trainer said it finished is never stored nor told failed: once its
starts are spent, the files its folder in storage lacks are named in both
(box/unfinished_uploads.py).

Settings: $GLUCOSE_WATCHDOG_CONFIG (the watchdog's). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from box import contract, docker_cli, run_ends, unfinished_uploads, user_files
from box.box_time import boot_time, now_seconds, read_boot_id
from box.watchdog_config import WatchdogConfig, load_config_or_say_why

DOCKER_POLL_SECONDS = 2
# Pause before the 1st, 2nd and 3rd start of a run in one boot, after its last exit.
RETRY_DELAYS_SECONDS = (0, 60, 180)
# Pause before starting again a run whose boxes did not meet (exit 69).
BOXES_AWAY_RETRY_SECONDS = 60
STOPPED_BY_USER_REASON = "stopped by the user"
PAST_DEADLINE_REASON = "past its deadline"
FINISHED_REASON = contract.STATE_FINISHED
"""Its status says so (its uploads landed, or it had none), or it exited 0."""


def log(message: str) -> None:
    print(f"glucose-resume: {message}", flush=True)


def why_not_resume(
    container: docker_cli.TrainerContainer, run_dir: Path, booted_at: float | None, now: float
) -> str:
    """Empty when the container should be started again, else the reason it stays down."""
    if os.path.lexists(run_dir / contract.STOPPED_BY_USER):
        return STOPPED_BY_USER_REASON
    own = user_files.read_json(run_dir.parent, run_dir.name, contract.STATUS_FILE)
    # The heartbeat stands in for a status.json where there is none (a box of workers of
    # a multi-node run), but not in whether the uploads landed: those are rank 0's.
    status = contract.RunRecord.from_dict(
        own or user_files.read_json(run_dir.parent, run_dir.name, contract.HEARTBEAT_FILE)
    )
    state = status.state or ""
    if unfinished_uploads.not_landed(container, run_dir, contract.RunRecord.from_dict(own)):
        # Its last uploads did not land, or are not known to have: a start only uploads
        # them (trainer/checkpoints/final_upload.py) and exits 0, whatever the hour.
        return ""
    deadline = run_deadline(run_dir)
    if deadline is not None and now >= deadline:
        return f"{PAST_DEADLINE_REASON} (`fab train --run ID --hours H` gives it another)"
    if state == contract.STATE_FINISHED or container.exit_code == contract.EXIT_FINISHED:
        return FINISHED_REASON
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
    ends: list[run_ends.End] = []
    codes = [resume_one(config, container, config.runs_dir, ends) for container in containers]
    sweeps = docker_cli.list_containers(
        config.docker_command, include_stopped=True, label=contract.SWEEP_LABEL
    )
    # A sweep's driver is judged as a run is: its folder holds the same status.json
    # keys and the user's stop marker.
    sweeps = [container for container in sweeps if container.kind == "sweep"]
    codes += [resume_one(config, sweep, config.sweeps_dir, ends) for sweep in sweeps]
    run_ends.store_ends(config, ends, log)
    run_ends.tell_ends(config, ends, log)
    return max(codes, default=0)


def resume_one(
    config: WatchdogConfig,
    container: docker_cli.TrainerContainer,
    home: Path,
    ends: list[run_ends.End],
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
            ends.append(run_ends.End(container, home, state))
        return 0
    if container.exit_code == contract.EXIT_BOXES_AWAY and run_deadline(run_dir) is not None:
        return start_when_boxes_may_be_back(config, container)
    # Its starts in this boot, counted on /run: at most RETRY_DELAYS_SECONDS' length.
    boot_id = read_boot_id(config.boot_id_path)
    runs = load_attempts(Path(config.resume_state_path), boot_id)
    done = int((runs.get(container.key) or {}).get("attempts") or 0)
    if done >= len(RETRY_DELAYS_SECONDS):
        log(f"{what} stays down: started {len(RETRY_DELAYS_SECONDS)} times in this boot already")
        if unfinished_uploads.not_landed(container, run_dir):
            ends.append(run_ends.End(container, home, run_ends.UPLOADS_NOT_LANDED))
        return 0
    return start_within_bounds(config, container, boot_id, runs, done)


def end_state(container: docker_cli.TrainerContainer, reason: str) -> str | None:
    """What the message of a run that stays down for `reason` says it did; None for an
    end not told: the user stopped it, and knows."""
    if reason == STOPPED_BY_USER_REASON:
        return None
    if reason == FINISHED_REASON or container.exit_code == contract.EXIT_FINISHED:
        return FINISHED_REASON  # its trainer's word, whatever killed it after
    if reason.startswith(PAST_DEADLINE_REASON):
        return "missed its deadline"
    return f"failed (exit {container.exit_code})"


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


def start_within_bounds(
    config: WatchdogConfig,
    container: docker_cli.TrainerContainer,
    boot_id: str,
    runs: dict,
    done: int,
) -> int:
    """Start the container again once its pause after its last exit is over, counting
    the start in `runs` (load_attempts of `boot_id`); the caller has seen that it has a
    start left in this boot (`done` of them, fewer than RETRY_DELAYS_SECONDS' length)."""
    path = Path(config.resume_state_path)
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
