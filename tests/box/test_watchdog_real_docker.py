"""The box programs against a real Docker engine: what the fakes assume, checked.

A trainer stand-in (dash + sleep in a few-MB image) runs with the trainer's name
and label, then exits 75 like a preempted trainer; the watchdog must see it
running, and the resume unit must start it again. A `fab prepare-data` stand-in
with that container's name and label must count as a preparation.
"""

import time
import uuid

import pytest

from tests.fakes.fake_box import PREPARE_LABEL, RUN_ID_LABEL, FakeBox
from tests.fakes.stand_in_trainer import import_stand_in_image

PREEMPTED = 75
EXIT_WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def stand_in_image(docker_engine, tmp_path_factory):
    """An image with just dash, sleep and the C library, made by `docker import`."""
    name = import_stand_in_image(tmp_path_factory.mktemp("stand-in-image"), docker_engine.env)
    yield name
    docker_engine.run(["image", "rm", "--force", name], timeout_seconds=120, check=False)


@pytest.fixture
def trainer_stand_in(docker_engine, stand_in_image):
    """(run id, container id) of a container that sleeps 4 s, then exits 75."""
    run_id = f"box-test-{uuid.uuid4().hex[:8]}"
    started = docker_engine.run(
        [
            *("run", "-d", "--network", "none", "--name", f"glucose-train-{run_id}"),
            *("--label", f"{RUN_ID_LABEL}={run_id}"),
            *(stand_in_image, "/bin/sh", "-c", f"sleep 4; exit {PREEMPTED}"),
        ],
        timeout_seconds=120,
    )
    yield run_id, started.stdout.strip()
    docker_engine.run(["rm", "--force", started.stdout.strip()], timeout_seconds=60, check=False)


def _started_at(docker_engine, container_id: str) -> str:
    inspect = ["inspect", "--format", "{{.State.StartedAt}}", container_id]
    return docker_engine.run(inspect, timeout_seconds=30).stdout.strip()


def _box(tmp_path, docker_engine) -> FakeBox:
    return FakeBox(tmp_path / "box", docker_command=docker_engine.binary)


@pytest.mark.e2e
def test_watchdog_sees_a_real_running_trainer(docker_engine, trainer_stand_in, tmp_path):
    run_id, _ = trainer_stand_in
    box = _box(tmp_path, docker_engine)
    done = box.run("watchdog.py", now=time.time(), env=docker_engine.env)
    assert done.returncode == 0, done.stderr
    trainers = box.watchdog_state()["signals"]["trainers"]
    assert run_id in [trainer["run_id"] for trainer in trainers]
    assert "trainer" in box.watchdog_state()["busy_reasons"]


@pytest.mark.e2e
def test_resume_starts_a_real_preempted_trainer_again(docker_engine, trainer_stand_in, tmp_path):
    run_id, container_id = trainer_stand_in
    box = _box(tmp_path, docker_engine)
    box.write_status(run_id, state="preempted")
    wait = ["wait", container_id]
    exit_code = docker_engine.run(wait, timeout_seconds=EXIT_WAIT_SECONDS).stdout.strip()
    assert exit_code == str(PREEMPTED)
    first_start = _started_at(docker_engine, container_id)
    done = box.run("resume.py", env=docker_engine.env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"starting run {run_id} again" in done.stdout
    assert _started_at(docker_engine, container_id) != first_start


@pytest.mark.e2e
def test_watchdog_sees_a_real_running_preparation(docker_engine, stand_in_image, tmp_path):
    name = f"box-test-{uuid.uuid4().hex[:8]}"
    started = docker_engine.run(
        [
            *("run", "-d", "--network", "none", "--name", f"glucose-prepare-{name}"),
            *("--label", f"{PREPARE_LABEL}={name}"),
            *(stand_in_image, "/bin/sh", "-c", "sleep 60"),
        ],
        timeout_seconds=120,
    )
    try:
        box = _box(tmp_path, docker_engine)
        box.write_preparation_heartbeat(name, step=3, updated_at=time.time())
        done = box.run("watchdog.py", now=time.time(), env=docker_engine.env)
        assert done.returncode == 0, done.stderr
        preparations = box.watchdog_state()["signals"]["preparations"]
        assert [(p["name"], p["step"]) for p in preparations] == [(name, 3)]
        assert "preparation" in box.watchdog_state()["busy_reasons"]
    finally:
        docker_engine.run(
            ["rm", "--force", started.stdout.strip()], timeout_seconds=60, check=False
        )
