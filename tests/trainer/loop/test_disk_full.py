"""A full disk and a read-only run dir, on real tmpfs mounts: the trainer ends with one
line, exit 74, a true status.json where it can still write one, and no temp files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from box.contract import EXIT_UNWRITABLE
from tests.paths import REPO
from tests.trainer.trainer_process import start_process, trainer_command

pytestmark = pytest.mark.e2e

TRAIN_SECONDS = 300
# resnet18's checkpoint is ~46 MB: one fits, the second's temp file does not.
ONE_CHECKPOINT_MB = 60


def _train(data: Path, run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trainer", "train", "--data", str(data)]
    command += ["--run-dir", str(run_dir), "--model", "resnet18", "--batch-size", "32", *flags]
    env = {**os.environ, "GLUCOSE_IMDS_URL": "off", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=TRAIN_SECONDS
    )


def _ends_with_one_error_line(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == EXIT_UNWRITABLE, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and fragment in last, last


def _temp_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if ".tmp" in path.name]


def test_a_disk_that_fills_up_mid_run_ends_with_exit_74_and_no_temp_files(
    tiny_data: Path, tmpfs
) -> None:
    run_dir = tmpfs(f"{ONE_CHECKPOINT_MB}m") / "run"
    result = _train(tiny_data, run_dir, "--max-steps", "4", "--checkpoint-every-steps", "1")
    _ends_with_one_error_line(result, "step-000000002-epoch-0000.pt): No space left on device")
    assert _temp_files(run_dir) == []
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", EXIT_UNWRITABLE)


def test_a_read_only_run_dir_ends_with_exit_74(tiny_data: Path, tmpfs) -> None:
    mount = tmpfs(f"{ONE_CHECKPOINT_MB * 2}m")
    run_dir = mount / "run"
    assert _train(tiny_data, run_dir, "--max-steps", "1").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    result = _train(tiny_data, run_dir, "--max-steps", "2")
    _ends_with_one_error_line(result, "Read-only file system")


def test_a_read_only_run_dir_under_torchrun_ends_the_launch_with_exit_74_once(
    tiny_data: Path, tmpfs, tmp_path: Path
) -> None:
    # No rank can record the failure in a read-only run dir: the rank's own signal to
    # the launcher carries the 74, and torchrun ends instead of restarting the group.
    mount = tmpfs(f"{ONE_CHECKPOINT_MB * 2}m")
    run_dir = mount / "run"
    assert _train(tiny_data, run_dir, "--max-steps", "1").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    torchrun = ["--nproc-per-node", "2", "--standalone", "--max-restarts", "3"]
    train = trainer_command(tiny_data, run_dir, "--batch-size", "32", "--max-steps", "2")
    log = tmp_path / "launch.log"
    process = start_process(["-m", "trainer", "launch", "--", *torchrun, *train], log)
    code = process.wait(TRAIN_SECONDS)
    output = log.read_text()
    assert code == EXIT_UNWRITABLE, output
    assert output.count("device: ") == 1, output  # rank 0 started once: no restart
    assert "Read-only file system" in output
