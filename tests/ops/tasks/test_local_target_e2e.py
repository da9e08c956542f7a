"""The local target end to end: `fab` drives this machine's own Docker engine, no SSH,
through upload-data, train, status, logs, stop, a download (the README's order), a
resume, runs and download, with the real trainer image and checkpoints streaming to a
`file://` store here, and the run's end told to a webhook on 127.0.0.1; at 100 columns,
where no word of what fab says may be cut short."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ops.terminal_text import ELLIPSIS
from tests.ops.conftest import FAB, wait_for_status
from tests.paths import REPO

pytestmark = pytest.mark.e2e

POLL_SECONDS = 1
TOLD_WITHIN_SECONDS = 60
DATASET = "synth-local-e2e"
TRAINER_ARGS = (
    "--model resnet18 --batch-size 16 --epochs 50 --log-every 1 --checkpoint-every-steps 4"
)


class ThisMachine:
    """A target file without hosts (this machine) and the real `fab` pointed at it."""

    def __init__(self, directory: Path, webhook: str) -> None:
        self.directory = directory
        self.box_root = directory / "box"
        self.storage = directory / "storage"
        self.known_hosts = directory / "known_hosts"
        self.target_file = directory / "here.json"
        keys = {
            "boxRoot": str(self.box_root),
            "storageUri": f"file://{self.storage}",
            "notifyWebhook": webhook,
        }
        self.target_file.write_text(json.dumps(keys))

    def fab(self, *args: str) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "GLUCOSE_TARGET": str(self.target_file),
            "GLUCOSE_KNOWN_HOSTS": str(self.known_hosts),
            "COLUMNS": "100",
        }
        return subprocess.run(
            [str(FAB), *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
        )

    def fab_ok(self, *args: str) -> subprocess.CompletedProcess:
        result = self.fab(*args)
        said = f"fab {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        assert result.returncode == 0, said
        assert ELLIPSIS not in result.stdout + result.stderr, said
        return result

    def wait_for_status(self, run_id: str, pattern: str) -> str:
        return wait_for_status(self.fab, run_id, pattern, POLL_SECONDS)


@pytest.fixture
def here(tmp_path, docker_engine, webhook) -> ThisMachine:
    return ThisMachine(tmp_path, webhook.server.endpoint)


@pytest.fixture
def run_id(docker_engine):
    """A run id no other session on this engine uses; its container removed afterwards."""
    run = f"local-e2e-{uuid.uuid4().hex[:8]}"
    yield run
    docker_engine.run(["rm", "--force", f"glucose-train-{run}"], timeout_seconds=120, check=False)


def _step(status_out: str) -> int:
    return int(re.search(r"step (\d+) /", status_out).group(1))


def test_train_status_logs_stop_download_resume_runs_download_on_this_machine(
    here, run_id, trainer_image, docker_engine, webhook, tmp_path
):
    started_s = time.monotonic()
    data = tmp_path / DATASET
    subprocess.run(
        [sys.executable, "-m", "trainer", "synth", "--out", str(data), "--cases", "12",
         "--windows-per-case", "64", "--seed", "0"],
        check=True, capture_output=True,
    )  # fmt: skip
    here.fab_ok("upload-data", "--data", str(data))
    common = ("--dataset", DATASET, "--run", run_id, "--trainer-args", TRAINER_ARGS,
              "--image-name", trainer_image.tag)  # fmt: skip
    started = here.fab_ok("train", *common)
    assert started.stdout.strip() == run_id
    assert f"run {run_id} started on this machine" in started.stderr
    assert "guard rails: none on this machine" in started.stderr
    assert f"told when it ends: run {run_id}'s end goes to notifyWebhook" in started.stderr
    # Paths as this machine names them, not the container's /workspace.
    cache = here.box_root / "datasets" / DATASET
    assert f"into {cache}, sha256 verified" in started.stderr, started.stderr
    # The engine here runs the container, with the box contract's name and label.
    labels = docker_engine.run(
        ["inspect", "--format", "{{json .Config.Labels}}", f"glucose-train-{run_id}"],
        timeout_seconds=30,
    ).stdout
    assert json.loads(labels)["glucose-training.run-id"] == run_id

    running = here.wait_for_status(run_id, r"state:\s+running[\s\S]*step [1-9]\d* /")
    assert "gpu:        none" in running
    stopped = here.fab_ok("stop", "--run", run_id)
    assert "exit 75" in stopped.stdout
    checkpoint = re.search(
        rf"checkpoint: file://\S+/runs/{run_id}/checkpoints/(\S+)", stopped.stdout
    )
    assert checkpoint, stopped.stdout
    stored = here.storage / "runs" / run_id / "checkpoints" / checkpoint.group(1)
    sidecar = stored.with_name(stored.name + ".sha256").read_text()
    assert sidecar.split()[0] == hashlib.sha256(stored.read_bytes()).hexdigest()
    stopped_step = _step(here.fab_ok("status", "--run", run_id).stdout)
    # A stopped run is whole in storage: every file verified against the box's copy,
    # train.log to its last line.
    after_stop = here.fab_ok("download", "--run", run_id, "--to", str(tmp_path / "stopped"))
    assert "not verified: 0; not downloaded: 0;" in after_stop.stdout, after_stop.stdout
    assert f"safe to delete file://{here.storage}/runs/{run_id}" in after_stop.stderr
    stored_log = (tmp_path / "stopped" / "train.log").read_text().splitlines()
    assert stored_log[-1].startswith("stop requested (SIGTERM)"), stored_log[-3:]

    # The id alone: the dataset, the flags (resnet18: another model's checkpoint is
    # refused) and the image come from the run's launch record.
    here.fab_ok("train", "--run", run_id, "--max-steps", str(stopped_step + 4))
    finished = here.wait_for_status(run_id, r"state:\s+finished")
    assert _step(finished) == stopped_step + 4
    logs = here.fab_ok("logs", "--run", run_id).stdout
    assert f"resume: step {stopped_step}" in logs
    assert f"report in {here.box_root / 'runs' / run_id / 'report.md'}" in logs, logs[-2000:]
    assert "/workspace/" not in logs and "fontManager" not in logs
    # One message, of the end: none when `fab stop` stopped it (the user knows).
    told = webhook.wait_for_texts(1, TOLD_WITHIN_SECONDS)
    assert len(told) == 1 and told[0].startswith(f"run {run_id} finished: best val MAE "), told
    listed = here.fab_ok("runs").stdout
    assert re.search(rf"{run_id}\s.*finished", listed), listed

    to = tmp_path / "download"
    downloaded = here.fab_ok("download", "--run", run_id, "--to", str(to))
    assert f"safe to delete file://{here.storage}/runs/{run_id}" in downloaded.stderr
    manifest = json.loads((to / "manifest.json").read_text())
    assert "checkpoints/" + checkpoint.group(1) in manifest["files"]
    assert not here.known_hosts.exists()  # no SSH connection was ever made
    print(f"local target e2e: {time.monotonic() - started_s:.0f} s", file=sys.stderr)
