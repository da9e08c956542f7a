"""The trainer containers, as the docker CLI reports them.

Trainer containers carry the label `glucose-training.run-id=<run_id>` (see
ARCHITECTURE.md). `docker inspect` gives the same JSON on every engine version we
meet, so both the watchdog and the resume unit read that. Standard library only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import subprocess

RUN_ID_LABEL = "glucose-training.run-id"
DOCKER_TIMEOUT_SECONDS = 60
# 2026-11-22T03:00:00.123456789Z, or with a +01:00 offset on hosts with a local zone
DOCKER_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")


class DockerError(RuntimeError):
    """The docker CLI failed; the message carries its stderr."""


@dataclasses.dataclass(frozen=True)
class TrainerContainer:
    id: str
    name: str
    run_id: str
    running: bool
    exit_code: int
    created_at: float
    """Unix seconds."""
    started_at: float
    """Unix seconds of the latest start; 0 when never started."""


def _docker(command: str, *args: str) -> str:
    try:
        done = subprocess.run(
            [command, *args],
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DockerError(f"{command} {' '.join(args)}: {error}") from error
    if done.returncode != 0:
        raise DockerError(
            f"{command} {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}"
        )
    return done.stdout


def parse_docker_time(text: str) -> float:
    """Unix seconds from docker's RFC 3339 nanosecond timestamps; 0 for its zero time."""
    match = DOCKER_TIME.fullmatch(text or "")
    if not match or text.startswith("0001-01-01"):
        return 0.0
    stamp, fraction, zone = match.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    moment = datetime.datetime.fromisoformat(stamp + zone)
    return moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


def list_trainers(docker_command: str, *, include_stopped: bool) -> list[TrainerContainer]:
    """Trainer containers, newest first."""
    args = ["ps", "-q", "--no-trunc", "--filter", f"label={RUN_ID_LABEL}"]
    ids = _docker(docker_command, *(args + (["-a"] if include_stopped else []))).split()
    if not ids:
        return []
    containers = [
        _from_inspect(item) for item in json.loads(_docker(docker_command, "inspect", *ids))
    ]
    return sorted(containers, key=lambda container: container.created_at, reverse=True)


def _from_inspect(item: dict) -> TrainerContainer:
    state = item.get("State", {})
    return TrainerContainer(
        id=item["Id"],
        name=item.get("Name", "").lstrip("/"),
        run_id=(item.get("Config", {}).get("Labels") or {}).get(RUN_ID_LABEL, ""),
        running=bool(state.get("Running")),
        exit_code=int(state.get("ExitCode", 0)),
        created_at=parse_docker_time(item.get("Created", "")),
        started_at=parse_docker_time(state.get("StartedAt", "")),
    )


def start(docker_command: str, container_id: str) -> None:
    _docker(docker_command, "start", container_id)


def is_up(docker_command: str) -> bool:
    """Whether the engine answers (the resume unit waits for it after boot)."""
    try:
        _docker(docker_command, "info", "--format", "{{.ServerVersion}}")
    except DockerError:
        return False
    return True
