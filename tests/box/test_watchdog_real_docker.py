"""The box programs against a real Docker engine: what the fakes assume, checked.

A trainer stand-in (dash + sleep in a few-MB image) runs with the trainer's name
and label, then exits 75 like a preempted trainer; the watchdog must see it
running, and the resume unit must start it again. A `fab prepare-data` stand-in
with that container's name and label must count as a preparation. The end watch (this
machine's and a lab box's teller of run ends) waits for such a container and tells a
real webhook on 127.0.0.1.
"""

import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.fakes.fake_box import PREPARE_LABEL, RUN_ID_LABEL, FakeBox
from tests.fakes.stand_in_trainer import import_stand_in_image
from tests.paths import BOX_DIR

PREEMPTED = 75
EXIT_WAIT_SECONDS = 60
WATCH_SECONDS = 120


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


def _run_stand_in(docker_engine, stand_in_image, run_id: str, script: str) -> str:
    started = docker_engine.run(
        [
            *("run", "-d", "--network", "none", "--name", f"glucose-train-{run_id}"),
            *("--label", f"{RUN_ID_LABEL}={run_id}", "--entrypoint", "/bin/sh"),
            *(stand_in_image, "-c", script),
        ],
        timeout_seconds=120,
    )
    return started.stdout.strip()


@pytest.fixture
def ending(docker_engine, stand_in_image, tmp_path, webhook):
    """(box, start): a box whose end watch tells `webhook` (and stores a failed run's end
    in the `file://` store tmp_path/storage, as on this machine), and a way to start a
    stand-in run there that ends as its script says; each container removed afterwards."""
    box = FakeBox(
        tmp_path / "box",
        cloud="local",
        docker_command=docker_engine.binary,
        notify_webhook=webhook.server.endpoint,
        storage_uri=f"file://{tmp_path / 'storage'}",
    )
    started: list[str] = []

    def start(script: str) -> str:
        run_id = f"watch-test-{uuid.uuid4().hex[:8]}"
        (box.box_root / "runs" / run_id).mkdir(parents=True)
        started.append(_run_stand_in(docker_engine, stand_in_image, run_id, script))
        return run_id

    yield box, start
    for container in started:
        docker_engine.run(["rm", "--force", container], timeout_seconds=60, check=False)


def _watch(box, docker_engine, run_id: str) -> subprocess.CompletedProcess:
    done = box.run("end_watch.py", f"glucose-train-{run_id}", env=docker_engine.env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.e2e
def test_the_end_watch_tells_a_finished_run_once_with_its_mae_and_cost(
    ending, docker_engine, webhook
):
    box, start = ending
    run_id = start("sleep 2; exit 0")
    summary = {"val": {"mae": 16.230854971820694}, "cost_usd": 0.456}
    (box.box_root / "runs" / run_id / "summary.json").write_text(json.dumps(summary))
    _watch(box, docker_engine, run_id)
    assert webhook.texts == [f"run {run_id} finished: best val MAE 16.23, cost $0.46"]


@pytest.mark.e2e
def test_the_end_watch_tells_a_stop_nobody_here_resumes_with_the_command_that_does(
    ending, docker_engine, webhook
):
    box, start = ending
    run_id = start(f"sleep 1; exit {PREEMPTED}")
    box.write_status(run_id, state="preempted", val_mae=20.0)
    _watch(box, docker_engine, run_id)
    assert webhook.texts == [
        f"run {run_id} stopped (exit 75) with nothing here to start it again "
        f"(`fab train --run {run_id}`): best val MAE 20.00"
    ]


@pytest.mark.e2e
def test_the_end_watch_tells_nothing_of_a_run_the_user_stopped(ending, docker_engine, webhook):
    box, start = ending
    run_id = start(f"sleep 1; exit {PREEMPTED}")
    (box.box_root / "runs" / run_id / "STOPPED_BY_USER").write_text("")
    done = _watch(box, docker_engine, run_id)
    assert "stopped by the user" in done.stdout
    assert webhook.texts == []


@pytest.mark.e2e
def test_two_watches_of_one_run_tell_its_end_once(ending, docker_engine, webhook):
    box, start = ending
    run_id = start("sleep 3; exit 1")
    second = subprocess.Popen(
        [sys.executable, "-S", "-m", "box.end_watch", f"glucose-train-{run_id}"],
        cwd=BOX_DIR.parent,
        env={**docker_engine.env, "GLUCOSE_WATCHDOG_CONFIG": str(box.config_file)},
    )
    _watch(box, docker_engine, run_id)
    assert second.wait(timeout=WATCH_SECONDS) == 0
    assert webhook.texts == [f"run {run_id} failed (exit 1): no val MAE yet"]


@pytest.mark.e2e
def test_the_end_watch_stores_the_end_of_a_run_killed_before_its_first_upload(
    ending, docker_engine, webhook, tmp_path
):
    # `docker kill` sends SIGKILL, as the kernel's OOM killer does: docker reports 137.
    box, start = ending
    run_id = start("sleep 600")
    docker_engine.run(["kill", f"glucose-train-{run_id}"], timeout_seconds=60)
    _watch(box, docker_engine, run_id)
    stored = json.loads((tmp_path / "storage" / "runs" / run_id / "status.json").read_text())
    assert (stored["run_id"], stored["state"], stored["exit_code"]) == (run_id, "failed", 137)
    assert webhook.texts == [f"run {run_id} failed (exit 137): no val MAE yet"]
