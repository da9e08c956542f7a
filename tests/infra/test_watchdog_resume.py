"""The resume unit: after boot, the interrupted run starts again; others stay down."""

import pytest

from tests.infra.box_fakes import FakeBox

T0 = 1_800_000_000.0
PREEMPTED = 75


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, docker_wait_seconds=1)


def _resume(box):
    done = box.run("resume.py")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _started(box):
    return [call[1] for call in box.calls("docker") if call[0] == "start"]


def test_preempted_run_starts_again(box):
    container = box.add_trainer("run-1", running=False, created_at=T0, exit_code=PREEMPTED)
    box.write_status("run-1", state="preempted")
    done = _resume(box)
    assert _started(box) == [container]
    assert "starting run run-1 again" in done.stdout


def test_run_killed_with_the_host_starts_again(box):
    container = box.add_trainer("run-1", running=False, created_at=T0, exit_code=137)
    box.write_status("run-1", state="running")
    _resume(box)
    assert _started(box) == [container]


def test_run_stopped_by_the_user_stays_down(box):
    box.add_trainer("run-1", running=False, created_at=T0, exit_code=PREEMPTED)
    box.write_status("run-1", state="stopped")
    (box.box_root / "runs" / "run-1" / "STOPPED_BY_USER").touch()
    done = _resume(box)
    assert _started(box) == []
    assert "stopped by the user" in done.stdout


def test_finished_run_stays_down(box):
    box.add_trainer("run-1", running=False, created_at=T0, exit_code=0)
    box.write_status("run-1", state="finished")
    _resume(box)
    assert _started(box) == []


def test_failed_run_stays_down(box):
    box.add_trainer("run-1", running=False, created_at=T0, exit_code=1)
    box.write_status("run-1", state="failed")
    done = _resume(box)
    assert _started(box) == []
    assert "a failure, not an interruption" in done.stdout


def test_only_the_newest_run_is_considered(box):
    box.add_trainer("old", running=False, created_at=T0, exit_code=PREEMPTED)
    box.write_status("old", state="preempted")
    box.add_trainer("new", running=False, created_at=T0 + 3600, exit_code=0)
    box.write_status("new", state="finished")
    _resume(box)
    assert _started(box) == []


def test_run_docker_already_restarted_is_left_alone(box):
    box.add_trainer("run-1", running=True, created_at=T0)
    done = _resume(box)
    assert _started(box) == []
    assert "already running" in done.stdout


def test_box_without_runs_has_nothing_to_resume(box):
    done = _resume(box)
    assert "nothing to resume" in done.stdout


def test_docker_that_never_answers_fails_the_unit(box):
    box.set_docker_up(False)
    done = box.run("resume.py")
    assert done.returncode == 1
    assert "docker did not answer within 1s" in done.stdout
