"""Talking to the box: trust on first use, refusals, waiting for a booting box."""

import json
import subprocess
import threading
import time
from dataclasses import replace

import pytest
from invoke.exceptions import Exit

from ops.remote.ssh import Box
from ops.target.resolve import from_outputs, load_target_file
from tests.ops.conftest import assert_one_line_error, make_local_box


@pytest.fixture
def box_env(local_box, monkeypatch):
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    monkeypatch.setenv("GLUCOSE_BOOT_WAIT_SECONDS", "10")
    return local_box


def test_first_connection_records_the_host_key(box_env):
    box = Box(load_target_file(box_env.target_file))
    assert box.run("echo hello").stdout.strip() == "hello"
    recorded = box_env.known_hosts.read_text()
    key_type, key_text = box_env.server.host_public_key.split()[:2]
    assert f"[127.0.0.1]:{box_env.server.port} {key_type} {key_text}" in recorded


def test_the_tests_box_has_a_home_of_its_own_not_this_machines(sshd_factory, tmp_path, monkeypatch):
    # bash under sshd reads ~/.bashrc even for one command: a home of the box's own keeps
    # this machine's start-up files (pyenv's rehash and its lock) out of every test.
    box = make_local_box(sshd_factory(), tmp_path)
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(box.known_hosts))
    home = box.server.directory / "home"
    (home / ".bashrc").write_text("echo box-own-bashrc\n")
    out = Box(load_target_file(box.target_file)).run('echo "HOME=$HOME"').stdout
    assert out.split() == ["box-own-bashrc", f"HOME={home}"]


def test_changed_host_key_is_refused(box_env):
    other_key = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(box_env.root.parent / "other")],
        check=True,
    )
    assert other_key.returncode == 0
    forged = (box_env.root.parent / "other.pub").read_text().split()[:2]
    box_env.known_hosts.write_text(f"[127.0.0.1]:{box_env.server.port} {' '.join(forged)}\n")
    result = box_env.fab("status")
    message = assert_one_line_error(result, "refusing to connect", "host key", "changed")
    assert "ssh-keygen -R" in message


def test_wrong_ssh_key_is_refused_with_the_key_named(box_env):
    wrong = box_env.root.parent / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    box_env.write_target(sshKeyPath=str(wrong))
    result = box_env.fab("status")
    assert_one_line_error(result, "refused SSH key", str(wrong))


def test_a_cloud_box_in_a_target_file_that_never_answers_is_reported_down(box_env, sshd_factory):
    gone = sshd_factory()
    gone.stop()
    box_env.write_target(cloud="aws", sshPort=gone.port)
    box_env.env["GLUCOSE_BOOT_WAIT_SECONDS"] = "2"
    started = time.monotonic()
    result = box_env.fab("status")
    message = assert_one_line_error(
        result, "is down or not ready", f"target file {box_env.target_file}", "after 2 s"
    )
    assert "pulumi" not in message
    assert time.monotonic() - started < 30


def test_connection_to_a_cloud_box_waits_for_the_ready_marker(box_env):
    box_env.write_target(cloud="aws")
    (box_env.root / "ready").unlink()
    threading.Timer(2.0, (box_env.root / "ready").write_text, args=("{}",)).start()
    box = Box(load_target_file(box_env.target_file))
    started = time.monotonic()
    assert box.run("echo up").stdout.strip() == "up"
    assert time.monotonic() - started >= 2.0


def test_a_stacks_box_without_ready_marker_gives_up_naming_cloud_init(box_env, monkeypatch):
    (box_env.root / "ready").unlink()
    monkeypatch.setenv("GLUCOSE_BOOT_WAIT_SECONDS", "1")
    outputs = {**json.loads(box_env.target_file.read_text()), "cloud": "aws"}
    box = Box(from_outputs(outputs, "stack test"))
    with pytest.raises(Exit, match=r"cloud-init still running.*pulumi stack output hosts"):
        box.run("true")


def test_failed_remote_command_is_one_line_with_its_last_error(box_env):
    box = Box(load_target_file(box_env.target_file))
    with pytest.raises(Exit, match=r"exited 3: boom"):
        box.run("echo boom >&2; exit 3")


def test_disk_full_on_the_box_gets_its_own_advice(box_env):
    box = Box(load_target_file(box_env.target_file))
    with pytest.raises(Exit, match="disk is full"):
        box.run("echo 'write error: No space left on device' >&2; exit 1")


def test_fab_ssh_runs_a_command_with_the_recorded_key(box_env):
    result = box_env.fab("ssh", "--command", "echo via-openssh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "via-openssh"
    key_type, key_text = box_env.server.host_public_key.split()[:2]
    recorded = f"[127.0.0.1]:{box_env.server.port} {key_type} {key_text}"
    assert recorded in box_env.known_hosts.read_text()


def test_fab_ssh_and_paramiko_share_the_known_hosts(box_env):
    Box(load_target_file(box_env.target_file)).run("true")  # paramiko records the key
    result = box_env.fab("ssh", "--command", "echo again")
    assert result.returncode == 0, result.stderr
    assert len(box_env.known_hosts.read_text().splitlines()) == 1


def test_box_1_is_reached_through_box_0_its_host_key_kept_per_box_0(two_boxes, monkeypatch):
    stack = two_boxes.stack
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(stack.known_hosts))
    target = load_target_file(stack.target_file)
    box_1 = Box(target, 1)
    assert box_1.address == f"{stack.server.user}@127.0.0.2:{stack.server.port} via 127.0.0.1"
    assert '"box": 1' in box_1.run(f"cat {stack.root}/ready").stdout
    box_1.close()
    # The gateway's key where every box 0's is; box 1's apart, under box 0's address:
    # another stack's box 1 has the same private address and another key.
    behind_box_0 = stack.known_hosts.with_name(f"{stack.known_hosts.name}.via-127.0.0.1")
    for server, known_hosts in ((stack.server, stack.known_hosts), (two_boxes.box_1, behind_box_0)):
        key_type, key_text = server.host_public_key.split()[:2]
        assert known_hosts.read_text().splitlines() == [
            f"[{server.host}]:{server.port} {key_type} {key_text}"
        ]


def test_box_1_is_out_of_reach_without_box_0(two_boxes, monkeypatch):
    stack = two_boxes.stack
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(stack.known_hosts))
    monkeypatch.setenv("GLUCOSE_BOOT_WAIT_SECONDS", "2")
    # Box 1 still listens on 127.0.0.2; box 0, the only way in, answers nowhere.
    target = replace(load_target_file(stack.target_file), hosts=("127.0.0.3",))
    with pytest.raises(Exit, match=r"via 127\.0\.0\.3 is down or out of reach"):
        Box(target, 1).run("true")
