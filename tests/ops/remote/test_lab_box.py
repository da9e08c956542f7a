"""A lab box (a target file with hosts, no cloud-init): ready when it answers SSH and
docker, without the `ready` marker; down at the first try, in one line that names the
target file; and said plainly to have no guard rails."""

import time

import pytest

from ops.remote.ssh import Box
from ops.target.resolve import load_target_file
from tests.ops.conftest import assert_one_line_error, make_local_box

# Far past any test's patience: a lab box must never be waited for like a booting VM.
CLOUD_BOOT_WAIT_SECONDS = "600"
FAILS_FAST_SECONDS = 15


@pytest.fixture
def lab_box(docker_engine, sshd_factory, tmp_path, monkeypatch):
    """A box over SSH whose sessions reach this machine's engine, without a ready marker."""
    server = sshd_factory({k: v for k, v in docker_engine.env.items() if k == "DOCKER_HOST"})
    box = make_local_box(server, tmp_path)
    (box.root / "ready").unlink()
    box.env["GLUCOSE_BOOT_WAIT_SECONDS"] = CLOUD_BOOT_WAIT_SECONDS
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(box.known_hosts))
    monkeypatch.setenv("GLUCOSE_BOOT_WAIT_SECONDS", CLOUD_BOOT_WAIT_SECONDS)
    return box


def test_lab_box_without_the_ready_marker_is_ready_once_docker_answers(lab_box):
    started = time.monotonic()
    box = Box(load_target_file(lab_box.target_file))
    assert box.run("echo up").stdout.strip() == "up"
    assert time.monotonic() - started < FAILS_FAST_SECONDS
    assert not (lab_box.root / "ready").exists()  # nothing pretends a setup ran


def test_lab_box_whose_docker_does_not_answer_fails_in_one_line(lab_box, sshd_factory):
    no_docker = sshd_factory({"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    lab_box.write_target(sshPort=no_docker.port, sshKeyPath=str(no_docker.client_key))
    started = time.monotonic()
    message = assert_one_line_error(
        lab_box.fab("status"), "answers SSH but not `docker info`", str(lab_box.target_file)
    )
    assert "docker group" in message
    assert time.monotonic() - started < FAILS_FAST_SECONDS


def test_lab_box_that_does_not_answer_fails_at_once_naming_the_target_file(lab_box, sshd_factory):
    gone = sshd_factory()
    gone.stop()
    lab_box.write_target(sshPort=gone.port)
    started = time.monotonic()
    message = assert_one_line_error(
        lab_box.fab("status"), "is down or out of reach", str(lab_box.target_file)
    )
    assert time.monotonic() - started < FAILS_FAST_SECONDS
    assert "hosts, sshPort and sshUser" in message
    assert "pulumi" not in message  # no stack made it


def test_status_of_a_lab_box_says_it_has_no_guard_rails(lab_box):
    result = lab_box.fab("status")
    assert result.returncode == 0, result.stderr
    assert "guard rails: none on this lab box" in result.stderr
    assert "fab train --run ID" in result.stderr


def test_lab_box_whose_box_root_cannot_be_made_names_boxroot(lab_box):
    lab_box.write_target(boxRoot="/dev/null/glucose")
    message = assert_one_line_error(lab_box.fab("status"), "cannot make /dev/null/glucose")
    assert "set boxRoot in the target file" in message
