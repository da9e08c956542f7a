"""What the watchdog looks at to tell a busy box from an idle one.

Three signals, each read the way a person would check by hand: the trainer
containers (`docker ps`), GPU utilisation (`nvidia-smi`) and interactive SSH
sessions (sshd's per-session process titles in /proc). Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import docker_cli
from watchdog_config import WatchdogConfig

NVIDIA_SMI_TIMEOUT_SECONDS = 30
# sshd retitles each session's unprivileged process `sshd: USER@pts/N` when the
# client asked for a terminal and `sshd: USER@notty` when it did not (a port
# forward, `ssh -N`, scp, fab's exec channels); OpenSSH 9.8+ names the binary
# sshd-session. Only a terminal means a person is sitting at the box.
SSH_PTY_TITLE = re.compile(r"sshd(?:-session)?: (\S+@pts/\d+)")


@dataclasses.dataclass(frozen=True)
class Trainer:
    run_id: str
    started_at: float
    """Unix seconds the container last started."""
    last_checkpoint_at: float | None
    """From the run's status.json; None when the trainer has not written one yet."""


@dataclasses.dataclass(frozen=True)
class Signals:
    gpu_utilization: list[int] | None
    """Percent per GPU; None when nvidia-smi is missing or failed."""
    trainers: list[Trainer]
    """Running trainer containers."""
    ssh_sessions: list[str]
    """`user@pts/N (pid P)` per interactive session."""
    problems: list[str]
    """Signals that could not be read (logged; never treated as busy)."""

    def as_json(self) -> dict:
        return {
            "gpu_utilization": self.gpu_utilization,
            "trainers": [dataclasses.asdict(trainer) for trainer in self.trainers],
            "ssh_sessions": self.ssh_sessions,
            "problems": self.problems,
        }


def read_signals(config: WatchdogConfig) -> Signals:
    problems: list[str] = []
    return Signals(
        gpu_utilization=gpu_utilization(config.nvidia_smi_command, problems),
        trainers=running_trainers(config, problems),
        ssh_sessions=interactive_ssh_sessions(Path(config.proc_root)),
        problems=problems,
    )


def gpu_utilization(command: str, problems: list[str]) -> list[int] | None:
    args = [command, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
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


def running_trainers(config: WatchdogConfig, problems: list[str]) -> list[Trainer]:
    try:
        containers = docker_cli.list_trainers(config.docker_command, include_stopped=False)
    except docker_cli.DockerError as error:
        problems.append(f"docker: {error}")
        return []
    return [
        Trainer(
            run_id=container.run_id,
            started_at=container.started_at,
            last_checkpoint_at=_last_checkpoint_at(config.runs_dir / container.run_id),
        )
        for container in containers
        if container.running
    ]


def _last_checkpoint_at(run_dir: Path) -> float | None:
    """`last_checkpoint_at` from the trainer's status.json (ARCHITECTURE.md)."""
    try:
        value = json.loads((run_dir / "status.json").read_text()).get("last_checkpoint_at")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def interactive_ssh_sessions(proc_root: Path) -> list[str]:
    sessions = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # the process ended while we looked
        match = SSH_PTY_TITLE.match(title.strip())
        if match:
            sessions.append(f"{match.group(1)} (pid {entry.name})")
    return sorted(sessions)
