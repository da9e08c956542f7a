"""Exactly one thing restarts a trainer: the box's resume unit, proven on a real engine.

The trainer stand-in runs with the real `docker run` line of ops/run/container.py
(`--restart no`). The engine is then restarted as at a box's boot: docker must bring
back nothing by itself, neither a user-stopped run, nor a preempted one, nor a
crash, nor a run the engine's own stop interrupted; resume.py then starts only the
interrupted ones, and a run the user stopped stays down whatever comes.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time

import pytest

from ops.run.container import Launch, container_name, docker_run_command
from ops.target.schema import Target
from tests.fakes.fake_box import FakeBox
from tests.fakes.stand_in_trainer import import_stand_in_image

pytestmark = pytest.mark.e2e
PREEMPTED = 75
SETTLE_SECONDS = 5
EXIT_WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def image(restartable_engine, tmp_path_factory):
    return import_stand_in_image(tmp_path_factory.mktemp("stand-in"), restartable_engine.env)


@pytest.fixture
def box(tmp_path, restartable_engine):
    box = FakeBox(tmp_path / "box", docker_command=shutil.which("docker"), docker_wait_seconds=10)
    (box.box_root / "datasets" / "synthetic").mkdir(parents=True)
    yield box
    stale = restartable_engine.docker("ps", "-aq").stdout.split()
    if stale:
        restartable_engine.docker("rm", "--force", *stale)


def _run(engine, box: FakeBox, image: str, run_id: str, behaviour: str) -> None:
    target = Target(
        cloud="local",
        hosts=("127.0.0.1",),
        ssh_user="root",
        storage_uri="file:///nowhere",
        source="test",
        box_root=str(box.box_root),
        docker_network="none",
    )
    launch = Launch(run_id, image, "synthetic", (behaviour,))
    (box.box_root / "runs" / run_id).mkdir(parents=True, exist_ok=True)
    command = shlex.split(docker_run_command(target, launch, gpus=False, user="0:0"))
    started = engine.docker(*command[1:])
    assert started.returncode == 0, started.stderr


def _state(engine, run_id: str) -> dict:
    inspect = engine.docker("inspect", container_name(run_id))
    return json.loads(inspect.stdout)[0]["State"]


def _wait_exit(engine, run_id: str) -> int:
    done = engine.docker("wait", container_name(run_id), timeout_seconds=EXIT_WAIT_SECONDS)
    return int(done.stdout.strip())


def _resume(box, engine) -> str:
    done = box.run("resume.py", env=engine.env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_trainer_container_has_no_docker_restart_policy(restartable_engine, box, image):
    _run(restartable_engine, box, image, "policy", "crash")
    inspect = restartable_engine.docker("inspect", container_name("policy"))
    assert json.loads(inspect.stdout)[0]["HostConfig"]["RestartPolicy"]["Name"] == "no"


def test_an_engine_restart_brings_back_no_trainer_and_resume_only_the_interrupted(
    restartable_engine, box, image
):
    engine = restartable_engine
    _run(engine, box, image, "user-stopped", "run")
    (box.box_root / "runs" / "user-stopped" / "STOPPED_BY_USER").touch()  # `fab stop`
    engine.docker("stop", "--time", "10", container_name("user-stopped"))
    _run(engine, box, image, "crashed", "crash")
    _run(engine, box, image, "preempted", "exit-75")
    _run(engine, box, image, "interrupted", "run")
    for run_id, code in (("user-stopped", PREEMPTED), ("crashed", 1), ("preempted", PREEMPTED)):
        assert _wait_exit(engine, run_id) == code

    engine.restart()  # stops "interrupted" (SIGTERM -> 75), as a docker upgrade would
    time.sleep(SETTLE_SECONDS)
    for run_id in ("user-stopped", "crashed", "preempted", "interrupted"):
        assert not _state(engine, run_id)["Running"], f"docker brought {run_id} back"
    assert _state(engine, "interrupted")["ExitCode"] == PREEMPTED

    # One look judges every run on the box: both interrupted ones come back at once.
    said = _resume(box, engine)
    assert "starting run interrupted again" in said
    assert "starting run preempted again" in said
    assert "run crashed stays down: exited 1" in said
    assert "run user-stopped stays down: stopped by the user" in said
    assert _state(engine, "interrupted")["Running"]
    assert not _state(engine, "crashed")["Running"]

    engine.restart()
    time.sleep(SETTLE_SECONDS)
    assert not _state(engine, "user-stopped")["Running"]


def test_the_watchdog_calls_a_real_crash_loop_idle(restartable_engine, box, image):
    # An old container under docker's on-failure policy, crashing at once, forever.
    engine = restartable_engine
    engine.docker(
        "run", "--detach", "--network", "none", "--restart", "on-failure",
        "--name", container_name("looping"), "--label", "glucose-training.run-id=looping",
        image, "crash",
    )  # fmt: skip
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while (
        json.loads(engine.docker("inspect", container_name("looping")).stdout)[0]["RestartCount"]
        < 2
    ):
        assert time.monotonic() < deadline, "docker never restarted the crashing container"
        time.sleep(0.5)
    idle_limit_minutes = 3
    start = time.time()
    for minute in range(idle_limit_minutes + 2):
        done = box.run("watchdog.py", now=start + minute * 60, env=engine.env)
        assert done.returncode == 0, done.stderr
        assert "trainer" not in box.watchdog_state()["busy_reasons"]
        if box.calls("shutdown"):
            break
    assert box.calls("shutdown") == [["-h", "now"]]
