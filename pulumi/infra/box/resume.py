#!/usr/bin/env python3
"""Resume unit: after boot, start the interrupted training run again.

The box sleeps through spot evictions, the nightly stop and idle stops; when it
comes back, the newest trainer container that was interrupted is started again
(`docker start`) and the trainer resumes from the newest checkpoint in storage.
Interrupted = exited 75 (preempted, checkpoint uploaded; ARCHITECTURE.md), or
killed with the host while its status.json still said running/preempted. A run
that finished, failed or was stopped by the user (`fab stop` writes
runs/<id>/STOPPED_BY_USER) stays down. Docker's own `on-failure` restart policy
may already have started it: then there is nothing to do.

Settings: $GLUCOSE_WATCHDOG_CONFIG (the watchdog's). Standard library only.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import docker_cli
from watchdog_config import WatchdogConfig, load_config_or_say_why

PREEMPTED_EXIT_CODE = 75
# The trainer never got to write its final state: the host went down under it.
UNFINISHED_STATES = ("running", "preempted")
DOCKER_POLL_SECONDS = 2


def log(message: str) -> None:
    print(f"glucose-resume: {message}", flush=True)


def run_state(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "status.json").read_text()).get("state", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def why_not_resume(container: docker_cli.TrainerContainer, run_dir: Path) -> str:
    """Empty when the container should be started again, else the reason it stays down."""
    if (run_dir / "STOPPED_BY_USER").exists():
        return "stopped by the user"
    state = run_state(run_dir)
    if state == "finished" or container.exit_code == 0:
        return "finished"
    if container.exit_code == PREEMPTED_EXIT_CODE or state in UNFINISHED_STATES:
        return ""
    status = state or "unknown"
    return f"exited {container.exit_code} with status {status}: a failure, not an interruption"


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
        return 0
    newest = containers[0]
    if newest.running:
        log(f"run {newest.run_id} is already running ({newest.name})")
        return 0
    reason = why_not_resume(newest, config.runs_dir / newest.run_id)
    if reason:
        log(f"run {newest.run_id} stays down: {reason}")
        return 0
    log(f"starting run {newest.run_id} again ({newest.name}, exit {newest.exit_code})")
    docker_cli.start(config.docker_command, newest.id)
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
