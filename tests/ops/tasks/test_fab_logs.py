"""`fab logs` for a run no container holds: its `train.log` from the stack's storage, or
one line saying there is none (not Docker's "No such container", twice).

The local target (a target file without hosts) with the real Docker engine, which holds
no container of these runs, and a real `file://` store.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

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
