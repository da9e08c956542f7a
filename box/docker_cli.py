"""Our containers, as the docker CLI reports them.

Trainer containers are named `glucose-train-<run_id>` and labelled
`glucose-training.run-id`; `fab prepare-data`'s are `glucose-prepare-<name>`,
labelled `glucose-training.prepare` (see ARCHITECTURE.md). The run id (dataset
name) is taken from the name, checked against the run-id pattern, never from the
label's value: anyone in the docker group can set a label to `../../etc`. `docker
inspect` gives the same JSON on every engine version we meet, so both the watchdog
and the resume unit read that. Standard library only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re

from box import contract
from box.bounded_command import CommandTimeout, run_bounded

# kind -> (label, name prefix): a container of that kind carries both.
KINDS = {
    "train": (contract.RUN_ID_LABEL, contract.TRAIN_CONTAINER_PREFIX),
    "prepare": (contract.PREPARE_LABEL, contract.PREPARE_CONTAINER_PREFIX),
    "sweep": (contract.SWEEP_LABEL, contract.SWEEP_CONTAINER_PREFIX),
}
DOCKER_TIMEOUT_SECONDS = 20
# 2026-11-22T03:00:00.123456789Z, or with a +01:00 offset on hosts with a local zone
DOCKER_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")


class DockerError(RuntimeError):
    """The docker CLI failed; the message carries its stderr."""


@dataclasses.dataclass(frozen=True)
class TrainerContainer:
    id: str
    name: str
    run_id: str
    """The run id; a preparation's dataset name, a sweep's id."""
    kind: str
    """`train`, `prepare` or `sweep` (KINDS)."""
    running: bool
    """Running and not merely waiting for docker's restart policy."""
    exit_code: int
    restart_count: int
    """Restarts by docker's own policy (0 after a `docker run` or `docker start`)."""
    created_at: float
    """Unix seconds."""
    started_at: float
    """Unix seconds of the latest start; 0 when never started."""
    finished_at: float
    """Unix seconds of the latest exit; 0 when it never exited."""

    @property
    def key(self) -> str:
        """Unique over kinds (a sweep may have a run's id): `run_id`, or `sweep:<id>`."""
        return self.run_id if self.kind == "train" else f"{self.kind}:{self.run_id}"


def _docker(command: str, *args: str) -> str:
    try:
        done = run_bounded([command, *args], DOCKER_TIMEOUT_SECONDS)
    except (OSError, CommandTimeout) as error:
        raise DockerError(f"{command} {' '.join(args)}: {error}") from error
    if done.returncode != 0:
        raise DockerError(
            f"{command} {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[:300]}"
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


def run_id_of(name: str, prefix: str = contract.TRAIN_CONTAINER_PREFIX) -> str | None:
    """The run id in a trainer container's name (`prefix`: another kind's), or None."""
    name = name.lstrip("/")
    run_id = name[len(prefix) :] if name.startswith(prefix) else ""
    return run_id if contract.NAME_PATTERN.fullmatch(run_id) else None


def list_trainers(docker_command: str, *, include_stopped: bool) -> list[TrainerContainer]:
    """Trainer containers, newest first; containers with a foreign name are left out."""
    found = list_containers(
        docker_command, include_stopped=include_stopped, label=contract.RUN_ID_LABEL
    )
    return [container for container in found if container.kind == "train"]


def list_containers(
    docker_command: str, *, include_stopped: bool, label: str = ""
) -> list[TrainerContainer]:
    """Containers of every kind in KINDS (or those with `label`), newest first."""
    args = ["ps", "-q", "--no-trunc", *(["-a"] if include_stopped else [])]
    ids = _docker(docker_command, *args, *(["--filter", f"label={label}"] if label else [])).split()
    if not ids:
        return []
    try:
        items = json.loads(_docker(docker_command, "inspect", *ids))
        containers = [_from_inspect(item) for item in items]
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise DockerError(f"{docker_command} inspect: unexpected answer ({error})") from error
    ours = [container for container in containers if container is not None]
    return sorted(ours, key=lambda container: container.created_at, reverse=True)


def _identity(name: str, labels: dict) -> tuple[str, str] | None:
    """(kind, run id) of a container of ours, else None."""
    for kind, (label, prefix) in KINDS.items():
        run_id = run_id_of(name, prefix) if label in labels else None
        if run_id:
            return kind, run_id
    return None


def _from_inspect(item: dict) -> TrainerContainer | None:
    state = item.get("State") or {}
    name = str(item.get("Name", "")).lstrip("/")
    identity = _identity(name, (item.get("Config") or {}).get("Labels") or {})
    if identity is None:
        return None
    kind, run_id = identity
    return TrainerContainer(
        id=str(item["Id"]),
        name=name,
        run_id=run_id,
        kind=kind,
        running=bool(state.get("Running")) and not state.get("Restarting"),
        exit_code=int(state.get("ExitCode") or 0),
        restart_count=int(item.get("RestartCount") or 0),
        created_at=parse_docker_time(item.get("Created", "")),
        started_at=parse_docker_time(state.get("StartedAt", "")),
        finished_at=parse_docker_time(state.get("FinishedAt", "")),
    )


def inspect_one(docker_command: str, container: str) -> TrainerContainer | None:
    """The container `container` (a name or id) of ours, or None when there is none (or
    it is no container of ours); DockerError when the engine does not answer."""
    try:
        items = json.loads(_docker(docker_command, "inspect", "--type", "container", container))
    except DockerError as error:
        if "no such" in str(error).lower():
            return None
        raise
    except ValueError as error:
        raise DockerError(f"{docker_command} inspect: unexpected answer ({error})") from error
    return _from_inspect(items[0]) if items else None


def wait(docker_command: str, container_id: str, timeout_seconds: float) -> bool:
    """Block until the container exits or `timeout_seconds` pass; whether `docker wait`
    returned (the container is down) rather than timed out or failed."""
    try:
        done = run_bounded([docker_command, "wait", container_id], timeout_seconds)
    except (OSError, CommandTimeout):
        return False
    return done.returncode == 0


def start(docker_command: str, container_id: str) -> None:
    _docker(docker_command, "start", container_id)


def is_up(docker_command: str) -> bool:
    """Whether the engine answers (the resume unit waits for it after boot)."""
    try:
        _docker(docker_command, "info", "--format", "{{.ServerVersion}}")
    except DockerError:
        return False
    return True
