"""The local target's box: commands run here, no SSH; the same answers as a box over SSH."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from box import contract
from ops.remote.boxes import box_for, nodes
from ops.remote.this_machine import ThisMachine
from ops.target.resolve import load_target_file
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO


def _target_file(directory: Path, **keys) -> Path:
    path = directory / "here.json"
    outputs = {"boxRoot": str(directory / "box"), "storageUri": f"file://{directory / 'store'}"}
    path.write_text(json.dumps({**outputs, **keys}))
    return path


@pytest.fixture
def here(docker_engine, tmp_path, monkeypatch):
    """This machine as a target, its box root and storage in a temp dir; no known_hosts."""
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(tmp_path / "known_hosts"))
    return load_target_file(_target_file(tmp_path))


def _fab(target_file: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "GLUCOSE_TARGET": str(target_file), **env}
    return subprocess.run(
        [str(FAB), *args], cwd=REPO, env=environment, capture_output=True, text=True, check=False
    )


def test_the_local_target_is_one_box_this_machine(here):
    (box,) = nodes(here)
    assert isinstance(box, ThisMachine)
    assert (box.address, box.node, box.root) == ("this machine", 0, here.box_root)
    with pytest.raises(Exit, match="is this machine alone: no node 1"):
        box_for(here, 1)


def test_box_root_and_file_storage_are_made_before_the_first_container(here, tmp_path):
    box = box_for(here)
    box.run("docker ps")
    assert not (tmp_path / "box").exists() and not (tmp_path / "store").exists()
    box.run("docker run --rm no-such-image-here-i32", check=False)
    assert {p.name for p in (tmp_path / "box").iterdir()} == set(contract.USER_DIRS)
    assert (tmp_path / "store").is_dir()


@pytest.mark.parametrize("command", [("runs",), ("runs", "--json"), ("status",), ("logs",),
                                     ("logs", "--run", "gone")])  # fmt: skip
def test_a_command_that_only_looks_makes_no_folder(docker_engine, tmp_path, command):
    _fab(_target_file(tmp_path), *command, GLUCOSE_KNOWN_HOSTS=str(tmp_path / "known_hosts"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here.json"]


def test_commands_run_here_as_this_user(here, tmp_path):
    box = box_for(here)
    assert box.run("echo $(id -u)").stdout.strip() == str(os.getuid())
    assert box.run("cat", stdin="fed on stdin").stdout == "fed on stdin"
    assert not (tmp_path / "known_hosts").exists()  # no SSH was tried


def test_a_failed_command_is_one_line_naming_this_machine(here):
    with pytest.raises(Exit, match=r"^on this machine, `echo \.\.\.` exited 3: boom$"):
        box_for(here).run("echo boom >&2; exit 3")
    assert box_for(here).run("exit 4", check=False).exited == 4


def test_input_goes_on_stdin_never_on_a_command_line(here, tmp_path):
    secret = tmp_path / "secret"
    code, _ = box_for(here).run_with_input(f"umask 077 && cat > {secret}", "KEY=value\n")
    assert code == 0 and secret.read_text() == "KEY=value\n"
    assert oct(secret.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(Exit, match="exited 1"):
        box_for(here).run_with_input("cat > /nonexistent/dir/x", "data")


def test_files_are_read_here_and_a_missing_one_is_none(here, tmp_path):
    box = box_for(here)
    (tmp_path / "box" / "runs").mkdir(parents=True)
    (tmp_path / "box" / "runs" / "status.json").write_text("{}")
    assert box.exists(f"{here.box_root}/runs/status.json")
    assert box.read_text(f"{here.box_root}/runs/status.json") == "{}"
    assert box.read_text(f"{here.box_root}/runs/missing.json") is None
    assert box.location(f"{here.box_root}/runs") == f"{here.box_root}/runs"
    assert not box.dropped


def test_an_engine_that_does_not_answer_is_one_line_at_the_first_command(tmp_path):
    result = _fab(_target_file(tmp_path), "status", DOCKER_HOST="unix:///nonexistent.sock")
    message = assert_one_line_error(result, "this machine's Docker engine does not answer")
    assert "the docker group" in message


def test_a_box_root_that_cannot_be_made_names_the_keys_to_set(docker_engine, tmp_path):
    where = load_target_file(_target_file(tmp_path, boxRoot="/dev/null/box"))
    with pytest.raises(Exit, match=r"cannot make /dev/null/box/runs .* set boxRoot and storageUri"):
        box_for(where).run("docker run --rm no-such-image-here-i32")


def test_fab_ssh_says_there_is_no_box_to_ssh_to(here, tmp_path):
    result = _fab(tmp_path / "here.json", "ssh")
    assert_one_line_error(result, "is this machine: no box to SSH to", f"{here.box_root}/runs")


def test_fab_hold_says_no_watchdog_stops_this_machine(here, tmp_path):
    result = _fab(tmp_path / "here.json", "hold", "2h")
    assert_one_line_error(result, "no idle watchdog stops it", "no hold needed")


def test_fab_push_says_this_machine_runs_the_image_it_built(here, tmp_path, tiny_image):
    result = _fab(tmp_path / "here.json", "push", "--image-name", tiny_image)
    assert_one_line_error(result, "is this machine: its engine runs the image it built")


def test_fab_box_update_says_no_box_programs_belong_here(here, tmp_path):
    result = _fab(tmp_path / "here.json", "box-update")
    assert_one_line_error(result, "is this machine: box programs are for boxes `pulumi up` made")


def test_what_a_failed_command_said_last_is_quoted_as_letters(here):
    # The box's words: an escape sequence in them is shown, never obeyed.
    with pytest.raises(Exit) as failed:
        box_for(here).run("printf 'no \\033[2J\\033]52;c;eA==\\007\\n' >&2; exit 3")
    assert failed.value.message == (
        "on this machine, `printf ...` exited 3: no \\x1b[2J\\x1b]52;c;eA==\\x07"
    )
