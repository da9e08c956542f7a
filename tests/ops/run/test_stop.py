"""`fab stop` records the user's stop whenever the run exists, running or not, so the
box's resume unit leaves it down: the real `fab` over the sshd fixture, the stand-in
trainer in a real Docker engine started with `fab`'s own `docker run` line, and the real
box/resume.py (tests/fakes/fake_box.py) looking at that engine afterwards."""

from __future__ import annotations

import json
import shlex
import shutil
import time

import pytest

from ops.run.container import Launch, container_name, docker_run_command
from ops.target.resolve import load_target_file
from tests.fakes.fake_box import FakeBox
from tests.fakes.stand_in_trainer import import_stand_in_image
from tests.ops.conftest import LocalBox, assert_one_line_error, make_local_box

PREEMPTED = 75
KILLED = 137
EXIT_WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def image(restartable_engine, tmp_path_factory) -> str:
    return import_stand_in_image(tmp_path_factory.mktemp("stand-in"), restartable_engine.env)


@pytest.fixture
def box(restartable_engine, sshd_factory, tmp_path) -> LocalBox:
    """A box whose SSH sessions drive the test's engine; its trainers on no network."""
    server = sshd_factory({"DOCKER_HOST": restartable_engine.box.docker_host})
    box = make_local_box(server, tmp_path)
    box.write_target(dockerNetwork="none")
    (box.root / "datasets" / "synthetic").mkdir()
    yield box
    stale = restartable_engine.docker("ps", "--all", "--quiet").stdout.split()
    if stale:
        restartable_engine.docker("rm", "--force", *stale)


def _start(engine, box: LocalBox, image: str, run_id: str, behaviour: str) -> None:
    """The stand-in trainer, started as `fab train` starts the real one."""
    launch = Launch(run_id, image, "synthetic", (behaviour,))
    (box.root / "runs" / run_id).mkdir()
    target = load_target_file(box.target_file)
    command = shlex.split(docker_run_command(target, launch, gpus=False, user="0:0"))
    started = engine.docker(*command[1:])
    assert started.returncode == 0, started.stderr


def _resume_unit(box: LocalBox, tmp_path) -> FakeBox:
    """box/resume.py as the box runs it, on this box's root and the real engine."""
    return FakeBox(
        tmp_path / "box-programs",
        docker_command=shutil.which("docker"),
        docker_wait_seconds=10,
        box_root=str(box.root),
    )


def _running(engine, run_id: str) -> bool:
    inspect = engine.docker("inspect", container_name(run_id))
    return json.loads(inspect.stdout)[0]["State"]["Running"]


@pytest.mark.e2e
def test_stop_of_a_run_waiting_for_its_restart_keeps_it_down(
    restartable_engine, box, image, tmp_path
):
    engine = restartable_engine
    _start(engine, box, image, "waiting", "exit-75")  # preempted: checkpointed, exit 75
    done = engine.docker("wait", container_name("waiting"), timeout_seconds=EXIT_WAIT_SECONDS)
    assert done.stdout.strip() == str(PREEMPTED)

    stopped = box.fab("stop", "--run", "waiting")

    assert stopped.returncode == 0, stopped.stderr
    assert "run waiting was not running (exited 75, checkpointed" in stopped.stdout
    assert "stop recorded on box 0" in stopped.stderr
    assert (box.root / "runs" / "waiting" / "STOPPED_BY_USER").exists()
    resumed = _resume_unit(box, tmp_path).run("resume.py", env=engine.env)
    assert "run waiting stays down: stopped by the user" in resumed.stdout
    assert not _running(engine, "waiting")


@pytest.mark.e2e
def test_stop_of_a_run_killed_with_its_box_keeps_it_down_when_the_box_is_back(
    restartable_engine, box, image, tmp_path
):
    engine = restartable_engine
    _start(engine, box, image, "evicted", "run")
    status = {"run_id": "evicted", "state": "running", "step": 40}
    (box.root / "runs" / "evicted" / "status.json").write_text(json.dumps(status))
    engine.docker("kill", container_name("evicted"))  # the host went down under it
    resume_unit = _resume_unit(box, tmp_path)
    resume_unit.reboot("after-eviction", at=time.time() + 1)

    stopped = box.fab("stop", "--run", "evicted")

    assert stopped.returncode == 0, stopped.stderr
    assert f"run evicted was not running (exited {KILLED})" in stopped.stdout
    resumed = resume_unit.run("resume.py", env=engine.env)
    assert "run evicted stays down: stopped by the user" in resumed.stdout
    assert not _running(engine, "evicted")


def test_stop_while_the_box_is_away_says_the_stop_is_not_recorded(sshd_factory, tmp_path):
    away = make_local_box(sshd_factory(), tmp_path)
    away.env["GLUCOSE_BOOT_WAIT_SECONDS"] = "1"
    away.server.stop()  # evicted: nothing answers at its address

    stopped = away.fab("stop", "--run", "r1")

    message = assert_one_line_error(stopped, "the stop of run r1 is NOT recorded on box 0")
    assert "`fab stop --run r1` again as soon as `fab status` answers" in message


@pytest.mark.e2e
def test_stop_of_a_sweep_waiting_for_its_restart_keeps_it_down(
    restartable_engine, box, image, tmp_path
):
    from ops.remote.ssh import Box
    from ops.run.sweep import container_name as sweep_container
    from ops.run.sweep import docker_run_command as sweep_run_command
    from trainer.sweep.spec import SweepSpec

    engine = restartable_engine
    spec = SweepSpec(sweep_id="sw-wait", dataset="synthetic", data_dir="/d", runs_dir="/r",
                     storage_uri="file:///s", params=["lr=1e-3,1e-2"], image=image)  # fmt: skip
    (box.root / "sweeps" / "sw-wait").mkdir(parents=True)
    on_box = Box(load_target_file(box.target_file))
    started = engine.docker(
        *shlex.split(sweep_run_command(on_box, spec, gpus=False, user="0:0"))[1:]
    )
    assert started.returncode == 0, started.stderr
    done = engine.docker("wait", sweep_container("sw-wait"), timeout_seconds=EXIT_WAIT_SECONDS)
    assert done.stdout.strip() == str(PREEMPTED)  # evicted: waits for the resume unit

    stopped = box.fab("sweep", "--stop", "--sweep", "sw-wait")

    assert stopped.returncode == 0, stopped.stderr
    assert "sweep sw-wait was waiting for its restart (exit 75); it stays down" in stopped.stdout
    assert (box.root / "sweeps" / "sw-wait" / "STOPPED_BY_USER").exists()
    resumed = _resume_unit(box, tmp_path).run("resume.py", env=engine.env)
    assert "sweep sw-wait stays down: stopped by the user" in resumed.stdout


def test_stop_of_a_trial_whose_sweep_is_not_running_says_so_and_marks_nothing(local_box):
    trial = local_box.root / "runs" / "sw1-t000"
    trial.mkdir(parents=True)
    (trial / "launch.json").write_text(json.dumps({"run_id": "sw1-t000", "sweep": "sw1"}))
    (trial / "status.json").write_text(json.dumps({"state": "running", "step": 4}))

    stopped = local_box.fab("stop", "--run", "sw1-t000")

    assert "run sw1-t000 is a trial of sweep sw1" in stopped.stderr
    assert_one_line_error(stopped, "sweep sw1 is not running on", "nothing to stop")
    assert not (trial / "STOPPED_BY_USER").exists()
