"""`fab logs` for a run no container holds: its `train.log` from the stack's storage, or
one line saying there is none (not Docker's "No such container", twice).

The local target (a target file without hosts) with the real Docker engine, which holds
no container of these runs, and a real `file://` store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.runs.log_lines import LINE_CAP_CHARACTERS
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO
from trainer.storage import open_store


@pytest.fixture
def here(docker_engine, tmp_path: Path) -> dict:
    storage = f"file://{tmp_path / 'storage'}"
    target = tmp_path / "here.json"
    target.write_text(json.dumps({"boxRoot": str(tmp_path / "box"), "storageUri": storage}))
    lines = "".join(f"epoch {n}: val MAE {20 - n}\n" for n in range(1, 6))
    open_store(storage).write_bytes("runs/s-lr-t001/train.log", lines.encode())
    return {"target": target, "storage": storage}


def _fab_logs(here: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLUCOSE_TARGET": str(here["target"])}
    return subprocess.run([str(FAB), "logs", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_a_run_without_a_container_shows_its_log_from_storage(here):
    done = _fab_logs(here, "--run", "s-lr-t001", "--tail", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "epoch 4: val MAE 16\nepoch 5: val MAE 15\n"
    assert "No such container" not in done.stdout + done.stderr


def test_a_run_with_no_container_and_no_stored_log_is_one_line(here):
    done = _fab_logs(here, "--run", "gone-run")
    message = assert_one_line_error(
        done, "no container holds run gone-run", "runs/gone-run/train.log", "fab status --run"
    )
    assert "No such container" not in done.stdout + done.stderr, message


def test_a_rotated_log_is_read_with_the_part_before_it(here):
    store = open_store(here["storage"])
    store.write_bytes("runs/plain-run/train.log.1", b"epoch 1\nepoch 2\n")
    store.write_bytes("runs/plain-run/train.log", b"epoch 3\n")
    done = _fab_logs(here, "--run", "plain-run", "--tail", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "epoch 2\nepoch 3\n"


def test_tail_takes_a_count_in_the_one_grammar(here):
    done = _fab_logs(here, "--run", "s-lr-t001", "--tail", "2e0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "epoch 4: val MAE 16\nepoch 5: val MAE 15\n"


def test_a_tail_that_is_no_count_is_one_line(here):
    assert_one_line_error(
        _fab_logs(here, "--run", "s-lr-t001", "--tail", "2x"),
        "fab logs: --tail is '2x', expected all, or a whole number",
        "pass e.g. --tail 100",
    )


def test_hours_are_checked_before_the_dataset_in_the_flags_wording(here):
    env = {**os.environ, "GLUCOSE_TARGET": str(here["target"])}
    done = subprocess.run([str(FAB), "train", "--dataset", "none-such", "--hours", "soon"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert_one_line_error(done, "fab train: --hours is 'soon', expected a duration such as 90m")


@pytest.fixture
def exited_container(docker_engine, probe_image) -> Iterator[str]:
    """Run r-both's container, ended: it wrote to stdout and stderr in turn, as the
    trainer does (its "checkpoint:" lines and errors go to stderr)."""
    script = (
        "echo step 1; sleep 0.2; echo 'checkpoint: step 1' >&2; sleep 0.2; "
        "echo step 2; sleep 0.2; printf 'error: bad \\033]52;c;eA==\\007\\n' >&2; exit 2"
    )
    name = "glucose-train-r-both"
    docker_engine.run(["rm", "--force", name], timeout_seconds=60, check=False)
    docker_engine.run(["run", "--name", name, "--volume", "/usr:/usr:ro", probe_image,
                       "/bin/sh", "-c", script], timeout_seconds=120, check=False)  # fmt: skip
    yield name
    docker_engine.run(["rm", "--force", name], timeout_seconds=60, check=False)


def test_stdout_and_stderr_come_in_the_order_docker_gives_them(here, exited_container):
    done = _fab_logs(here, "--run", "r-both")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "step 1\ncheckpoint: step 1\nstep 2\nerror: bad \\x1b]52;c;eA==\\x07\n"
    ), done.stdout  # the error and the checkpoint line, the escape shown as letters


def test_following_a_run_no_container_holds_says_so_and_fails(here):
    done = _fab_logs(here, "--run", "s-lr-t001", "--follow")
    assert done.stdout.endswith("epoch 5: val MAE 15\n")  # its stored log, then no pretence
    assert_one_line_error(done, "--follow: no container holds run s-lr-t001", "nothing adds")


HUGE_LINE_BYTES = 64 * 1024 * 1024
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, len(done.stdout), done.returncode)
"""


def _fab_logs_measured(env: dict, run_id: str) -> tuple[int, int, int]:
    """(peak memory of `fab logs --tail 5` in kB, bytes it printed, its exit code)."""
    args = [sys.executable, "-c", MEASURE, str(FAB), "logs", "--run", run_id, "--tail", "5"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=True)  # fmt: skip
    peak_kb, printed, code = map(int, done.stdout.split())
    return peak_kb, printed, code


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["s3", "az"])
def test_a_tail_of_a_huge_stored_log_reads_and_prints_a_bounded_part(
    kind, request, docker_engine, tmp_path
):
    """A stored train.log of one 64 MB line, no newline (the bucket is anyone's who can
    write it): `--tail 5` reads its end by ranged reads and prints one line cut to its
    cap, in about the memory the same command takes for a log of three lines."""
    emulator = request.getfixturevalue("moto_server" if kind == "s3" else "azurite")
    env = {**os.environ, **emulator.env}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in emulator.env.items():
            patch.setenv(name, value)
        uri = emulator.create_bucket("") if kind == "s3" else emulator.create_container("")
        store = open_store(uri)
        store.write_bytes("runs/r-small/train.log", b"a\nb\nc\n")
        store.write_bytes("runs/r-huge/train.log", b"x" * HUGE_LINE_BYTES)
    target = tmp_path / "here.json"
    target.write_text(json.dumps({"boxRoot": str(tmp_path / "box"), "storageUri": uri}))
    env["GLUCOSE_TARGET"] = str(target)
    small_kb, _, small_code = _fab_logs_measured(env, "r-small")
    huge_kb, printed, huge_code = _fab_logs_measured(env, "r-huge")
    assert small_code == huge_code == 0
    assert printed < LINE_CAP_CHARACTERS + 1000  # the line's cap, and the notes
    assert huge_kb - small_kb < 32 * 1024, (small_kb, huge_kb)  # not the 64 MB, nor twice it
