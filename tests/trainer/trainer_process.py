"""`python -m trainer train` as a real process, for the stop/kill/outage tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests.paths import REPO

STEP_WAIT_SECONDS = 180
EXIT_WAIT_SECONDS = 300


def trainer_command(data: Path, run_dir: Path, *flags: str) -> list[str]:
    """`-m trainer train` arguments: resnet18 on `data`, a log line every step."""
    command = ["-m", "trainer", "train", "--data", str(data), "--run-dir", str(run_dir)]
    return [*command, "--model", "resnet18", "--log-every", "1", *flags]


def start_process(
    arguments: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`python ARGUMENTS` from the repo root, its output appended to `log`."""
    # One OpenMP thread: the trainer shares two CI cores with the test's storage
    # servers and often a second trainer; spinning threads there cost 2-3x the time.
    environment = {"GLUCOSE_IMDS_URL": "off", **os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, *arguments],
            cwd=REPO,
            env=environment,
            stdout=output,
            stderr=output,
        )


def start_training(
    data: Path, run_dir: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Train resnet18 on the tiny data set; output goes to `run_dir`/../<name>.log."""
    return start_process(trainer_command(data, run_dir, *flags), log_of(run_dir), env)


def log_of(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.log"


def output_of(run_dir: Path) -> str:
    return log_of(run_dir).read_text()


def status_of(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def wait_for_step(run_dir: Path, step: int, process: subprocess.Popen) -> int:
    """Block until status.json reports `step` or more; the step seen."""
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while time.monotonic() < deadline:
        seen = status_of(run_dir).get("step") or 0
        if seen >= step:
            return seen
        if process.poll() is not None:
            raise AssertionError(f"trainer exited {process.returncode}:\n{output_of(run_dir)}")
        time.sleep(0.05)
    raise AssertionError(f"no step {step} after {STEP_WAIT_SECONDS} s:\n{output_of(run_dir)}")


def wait_for_exit(process: subprocess.Popen, run_dir: Path) -> int:
    try:
        return process.wait(EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"trainer still running:\n{output_of(run_dir)}") from None


def same_state(a: dict, b: dict) -> bool:
    """Checkpoint (sub)dicts equal key by key, tensors bit for bit."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            if not (isinstance(y, dict) and same_state(x, y)):
                return False
        elif isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True
