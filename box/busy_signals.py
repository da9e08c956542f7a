"""What the watchdog looks at to tell a busy box from an idle one.

Four signals, each read the way a person would check by hand: the trainer, `fab
prepare-data` and `fab sweep` containers (`docker ps`) with the progress they report, GPU
utilisation (`nvidia-smi`), interactive SSH sessions (sshd's login records) and
leases left by `fab train` / `fab hold`. Whatever a user can write is read through
user_files.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from box import contract, docker_cli, user_files
from box.bounded_command import CommandTimeout, run_bounded
from box.ssh_sessions import interactive_ssh_sessions
from box.watchdog_config import WatchdogConfig

NVIDIA_SMI_TIMEOUT_SECONDS = 10
# Rank 0 writes status.json (ARCHITECTURE.md); any rank may write heartbeat.json
# ({"step", "updated_at"}), so a box that holds only workers of a multi-node run
# still shows progress.
PROGRESS_FILES = (contract.STATUS_FILE, contract.HEARTBEAT_FILE)
# prepare-vitaldb's own ({"step", "updated_at"}), in its dataset's work dir.


@dataclasses.dataclass(frozen=True)
class Trainer:
    run_id: str
    started_at: float
    """Unix seconds the container last started; 0 when docker restarted it by itself."""
    step: int | None
    """The furthest step any progress file of the run reports."""
    updated_at: float | None
    """The newest plausible `updated_at` of those files."""
    uploading: bool = False
    """Its status says the run finished while storage was down: this start of its
    container only uploads what the store lacks (contract.STATE_UPLOAD_PENDING)."""

    @property
    def key(self) -> str:
        return self.run_id


@dataclasses.dataclass(frozen=True)
class _Job:
    """A container that is not a run's trainer yet is busy, as a run is, while the
    step of its progress file moves."""

    name: str
    started_at: float
    step: int | None
    updated_at: float | None

    KIND = ""

    @property
    def key(self) -> str:
        return f"{self.KIND}:{self.name}"  # never a run id (no ':' in those)


class Preparation(_Job):
    """A `fab prepare-data` container: busy while its heartbeat's step moves."""

    KIND = "prepare"


class Sweep(_Job):
    """A `fab sweep` driver: busy while its status.json's step (every trial's steps
    added up) moves."""

    KIND = "sweep"


@dataclasses.dataclass(frozen=True)
class Lease:
    name: str
    reason: str
    until: float


@dataclasses.dataclass(frozen=True)
class Signals:
    gpu_utilization: list[int] | None
    """Percent per GPU; None when nvidia-smi is missing or failed."""
    trainers: list[Trainer]
    """Running trainer containers."""
    preparations: list[Preparation]
    """Running `fab prepare-data` containers."""
    sweeps: list[Sweep]
    """Running `fab sweep` drivers."""
    ssh_sessions: list[str]
    """`user@pts/N (pid P)` per interactive session."""
    leases: list[Lease]
    """Leases still running."""
    problems: list[str]
    """Signals that could not be read (logged; never treated as busy)."""

    def as_json(self) -> dict:
        return {
            "gpu_utilization": self.gpu_utilization,
            "trainers": [dataclasses.asdict(trainer) for trainer in self.trainers],
            "preparations": [dataclasses.asdict(job) for job in self.preparations],
            "sweeps": [dataclasses.asdict(job) for job in self.sweeps],
            "ssh_sessions": self.ssh_sessions,
            "leases": [dataclasses.asdict(lease) for lease in self.leases],
            "problems": self.problems,
        }


def read_signals(config: WatchdogConfig, now: float) -> Signals:
    problems: list[str] = []

    def guarded(name: str, read: Callable[[], Any], default: Any) -> Any:
        # A surprise in one signal is logged and counts as idle: it must not stop
        # the watchdog from stopping the box.
        try:
            return read()
        except Exception as error:
            problems.append(f"{name}: {type(error).__name__}: {error}")
            return default

    trainers, preparations, sweeps = guarded(
        "docker", lambda: running_jobs(config, now, problems), ([], [], [])
    )
    return Signals(
        gpu_utilization=guarded(
            "nvidia-smi", lambda: gpu_utilization(config.nvidia_smi_command, problems), None
        ),
        trainers=trainers,
        preparations=preparations,
        sweeps=sweeps,
        ssh_sessions=guarded(
            "ssh",
            lambda: interactive_ssh_sessions(Path(config.utmp_path), Path(config.proc_root)),
            [],
        ),
        leases=guarded("leases", lambda: active_leases(config.leases_dir, now), []),
        problems=problems,
    )


def gpu_utilization(command: str, problems: list[str]) -> list[int] | None:
    args = [command, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        done = run_bounded(args, NVIDIA_SMI_TIMEOUT_SECONDS)
    except (OSError, CommandTimeout) as error:
        problems.append(f"nvidia-smi: {error}")
        return None
    if done.returncode != 0:
        problems.append(f"nvidia-smi: exit {done.returncode}: {done.stderr.strip()[:200]}")
        return None
    try:
        return [int(line.strip()) for line in done.stdout.splitlines() if line.strip()]
    except ValueError:
        problems.append(f"nvidia-smi: unreadable output {done.stdout[:200]!r}")
        return None


def running_jobs(
    config: WatchdogConfig, now: float, problems: list[str]
) -> tuple[list[Trainer], list[Preparation], list[Sweep]]:
    try:
        containers = docker_cli.list_containers(config.docker_command, include_stopped=False)
    except docker_cli.DockerError as error:
        problems.append(f"docker: {error}")
        return [], [], []
    trainers, preparations, sweeps = [], [], []
    for container in containers:
        if not container.running:
            continue
        # docker's own restarts (a crash loop under an old on-failure policy) give a
        # fresh StartedAt every minute: only the run's progress counts then.
        started_at = container.started_at if container.restart_count == 0 else 0.0
        if container.kind == "prepare":
            heartbeat = user_files.read_json(
                config.datasets_dir, container.run_id, *contract.PREPARE_HEARTBEAT
            )
            preparations.append(
                Preparation(container.run_id, started_at, *progress([heartbeat], now))
            )
        elif container.kind == "sweep":
            status = user_files.read_json(config.sweeps_dir, container.run_id, contract.STATUS_FILE)
            sweeps.append(Sweep(container.run_id, started_at, *progress([status], now)))
        else:
            status, heartbeat = (
                user_files.read_json(config.runs_dir, container.run_id, name)
                for name in PROGRESS_FILES
            )
            uploading = contract.RunRecord.from_dict(status).state == contract.STATE_UPLOAD_PENDING
            trainers.append(
                Trainer(
                    container.run_id,
                    started_at,
                    *progress([status, heartbeat], now),
                    uploading=uploading,
                )
            )
    return trainers, preparations, sweeps


def progress(files: list[dict | None], now: float) -> tuple[int | None, float | None]:
    """(furthest step, newest updated_at) over progress files (None: unreadable), each
    read as a run's record (contract.RunRecord: a heartbeat has the same keys)."""
    steps, times = [], []
    for found in files:
        record = contract.RunRecord.from_dict(found)
        if record.step is not None and record.step >= 0:
            steps.append(record.step)
        updated_at = user_files.sane_time(record.updated_at, now)
        if updated_at is not None:
            times.append(updated_at)
    return max(steps, default=None), max(times, default=None)


def active_leases(leases_dir: Path, now: float) -> list[Lease]:
    """Leases (contract.LEASE_FIELDS) still running, each capped."""
    leases = []
    for name in user_files.directory_names(leases_dir):
        lease = user_files.read_json(leases_dir, name) if name.endswith(".json") else None
        until = contract.lease_until(lease)
        if until is None or user_files.sane_time(lease.get("written_at"), now) is None:
            continue
        if until > now:
            leases.append(Lease(name[: -len(".json")], str(lease.get("reason", ""))[:200], until))
    return leases
