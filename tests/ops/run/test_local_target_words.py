"""What `fab stop` and `fab status` say of a run on this machine (the local target):
no cloud's words (no resume unit here), the one cost wording ($0.00: this machine bills
nothing, as `fab runs` and the guard rails say), and no ETA for a run that is not
running. The real `fab`, this machine's engine, the stand-in trainer started with
`fab`'s own `docker run` line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from box import contract
from ops.run.container import Launch, container_name, docker_run_command
from ops.target.resolve import load_target_file
from tests.fakes.stand_in_trainer import import_stand_in_image
from tests.ops.conftest import FAB
from tests.paths import REPO

pytestmark = pytest.mark.e2e

EXIT_WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def image(docker_engine, tmp_path_factory) -> str:
    return import_stand_in_image(tmp_path_factory.mktemp("stand-in"), docker_engine.env)


class Here:
    """A target file without hosts (this machine) and the real `fab` pointed at it."""

    def __init__(self, directory: Path) -> None:
        self.box_root = directory / "box"
        self.target_file = directory / "here.json"
        keys = {"boxRoot": str(self.box_root), "storageUri": f"file://{directory / 'store'}"}
        self.target_file.write_text(json.dumps(keys))
        for folder in contract.USER_DIRS:
            (self.box_root / folder).mkdir(parents=True, exist_ok=True)
        (self.box_root / "datasets" / "synthetic").mkdir()
        (directory / "store").mkdir()

    def fab(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "GLUCOSE_TARGET": str(self.target_file), "COLUMNS": "200"}
        return subprocess.run(
            [str(FAB), *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
        )

    def start(self, engine, image: str, run_id: str, behaviour: str) -> None:
        """The stand-in trainer as `fab train` starts the real one, with the records
        `fab train` and the trainer write: launch.json, and a status.json with an ETA."""
        run_dir = self.box_root / "runs" / run_id
        run_dir.mkdir()
        launch = contract.LaunchRecord(run_id=run_id, started_at=time.time(), hourly_price_usd=0)
        (run_dir / contract.LAUNCH_FILE).write_text(json.dumps(launch.to_json()))
        status = {"run_id": run_id, "state": "running", "step": 40, "total_steps": 400,
                  "eta_s": 600, "windows_per_s": 900.0, "updated_at": time.time()}  # fmt: skip
        (run_dir / contract.STATUS_FILE).write_text(json.dumps(status))
        target = load_target_file(self.target_file)
        user = f"{os.getuid()}:{os.getgid()}"
        command = docker_run_command(target, Launch(run_id, image, "synthetic", (behaviour,)),
                                     gpus=False, user=user)  # fmt: skip
        engine.run(shlex.split(command)[1:], timeout_seconds=120)


@pytest.fixture
def here(tmp_path, docker_engine) -> Here:
    return Here(tmp_path)


@pytest.fixture
def run_id(docker_engine):
    run = f"local-words-{uuid.uuid4().hex[:8]}"
    yield run
    docker_engine.run(["rm", "--force", container_name(run)], timeout_seconds=120, check=False)


def test_a_stop_here_names_the_run_dir_and_the_resume_not_a_resume_unit(
    here, docker_engine, image, run_id
):
    here.start(docker_engine, image, run_id, "run")
    stopped = here.fab("stop", "--run", run_id)
    assert stopped.returncode == 0, stopped.stderr
    run_dir = here.box_root / "runs" / run_id
    assert (
        f"stop recorded in {run_dir}: run {run_id} stays down until `fab train --run {run_id}` "
        "resumes it"
    ) in stopped.stderr
    assert "resume unit" not in stopped.stdout + stopped.stderr


def test_status_of_a_stopped_run_here_has_no_eta_and_the_one_cost_wording(
    here, docker_engine, image, run_id
):
    here.start(docker_engine, image, run_id, "run")
    running = here.fab("status", "--run", run_id).stdout
    assert "ETA: 10 min" in running  # while it runs, its ETA
    assert here.fab("stop", "--run", run_id).returncode == 0
    shown = here.fab("status", "--run", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "stopped by `fab stop`" in shown.stdout
    assert "ETA" not in shown.stdout
    assert "cost:       $0.00 (this machine bills nothing)" in shown.stdout
    assert "(this machine bills nothing)" in shown.stderr  # the guard rails' line says it too
    assert "gpu:        none (no nvidia-smi on this machine)" in shown.stdout


def test_a_run_that_exited_75_here_is_not_said_to_resume_by_itself(
    here, docker_engine, image, run_id
):
    here.start(docker_engine, image, run_id, "exit-75")
    waited = docker_engine.run(["wait", container_name(run_id)], timeout_seconds=EXIT_WAIT_SECONDS)
    assert waited.stdout.strip() == "75"
    shown = here.fab("status", "--run", run_id).stdout
    assert "nothing restarts it here: `fab train --run ID` resumes" in shown
    assert "preempted-waiting" not in shown and "when the box is back" not in shown
