"""`fab train --run ID` alone resumes a launched run as launched: its dataset, flags and
image from its launch record in storage; a flag that would change what it trains is one
line naming it, before anything ships.

The stack's box is nowhere (a storage-only target): each case ends before the first box
or image step, at the dataset's check in storage, whose message names the dataset the
resume took (the dataset is not uploaded on purpose), or at the refusal.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ops.run import relaunch
from ops.target.resolve import resolve_target
from tests.fixtures.run_folders import storage_only_target
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO
from trainer.storage import open_store

RUN = "r-resnet18"
LAUNCHED = {
    "run_id": RUN,
    "name": "first try",
    "image": "glucose-training:0a1b2c3",
    "dataset": "synth-small",
    "trainer_args": ["--epochs", "3", "--model", "resnet18", "--batch-size", "16"],
    "started_at": 1.79e9,
    "boxes": 1,
}


@pytest.fixture
def stack(tmp_path: Path) -> dict:
    storage = f"file://{tmp_path / 'storage'}"
    store = open_store(storage)
    store.write_bytes(f"runs/{RUN}/launch.json", json.dumps(LAUNCHED).encode())
    trial = {**LAUNCHED, "run_id": "sw-1-t002", "sweep": "sw-1", "trial": 2}
    store.write_bytes("runs/sw-1-t002/launch.json", json.dumps(trial).encode())
    store.write_bytes("sweeps/sw-1/sweep.json", b"{}")
    target = storage_only_target(tmp_path / "target.json", storage)
    return {"storage": storage, "target": target}


def _train(stack: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLUCOSE_TARGET": str(stack["target"]), "COLUMNS": "200"}
    return subprocess.run([str(FAB), "train", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_the_run_id_alone_resumes_on_the_dataset_it_was_launched_with(stack):
    result = _train(stack, "--run", RUN)
    assert_one_line_error(result, f"no dataset at {stack['storage']}/datasets/synth-small")


def test_a_resume_may_train_longer(stack):
    result = _train(stack, "--run", RUN, "--epochs", "6", "--hours", "2")
    assert_one_line_error(result, f"no dataset at {stack['storage']}/datasets/synth-small")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--trainer-args", "--model resnet34"],
         f"--model resnet34: run {RUN} was launched with --model resnet18 (its launch.json)"),
        (["--trainer-args", "--lr 3e-3"], f"--lr 0.003: run {RUN} was launched without --lr"),
        (["--dataset", "synth-large"],
         f"--dataset synth-large: run {RUN} was launched with --dataset synth-small"),
        (["--name", "other"], f"--name other: run {RUN} was launched with --name first try"),
    ],
)  # fmt: skip
def test_a_flag_that_changes_what_the_run_trains_is_one_line_naming_the_one_form(
    stack, flags, said
):
    result = _train(stack, "--run", RUN, *flags)
    assert_one_line_error(
        result,
        said,
        "a resume may change only --epochs, --max-steps, --hours, --image-name",
        f"`fab train --run {RUN}` alone resumes it as launched",
    )


def test_a_sweeps_trial_and_a_sweep_are_resumed_by_their_sweep(stack):
    result = _train(stack, "--run", "sw-1-t002")
    assert_one_line_error(result, "sw-1-t002 is trial 2 of sweep sw-1", "fab sweep --sweep sw-1")
    result = _train(stack, "--run", "sw-1")
    assert_one_line_error(result, "sw-1 is a sweep, not a run", "fab sweep --sweep sw-1")


def test_an_id_never_launched_is_a_new_run_that_needs_a_dataset(stack):
    result = _train(stack, "--run", "r-new")
    assert_one_line_error(result, "no run r-new was launched", "--dataset NAME")


def test_the_resume_keeps_the_runs_flags_and_image_and_adds_the_longer_length(stack):
    where = resolve_target(str(stack["target"]), None)
    given = relaunch.Given(trainer_args=("--epochs", "6", "--checkpoint-every", "60"))
    resumed = relaunch.for_run(where, RUN, given)
    assert resumed.trainer_args == (*LAUNCHED["trainer_args"], *given.trainer_args)
    assert resumed.epochs == 6 and resumed.name == "first try"
    assert resumed.image.recorded == LAUNCHED["image"]
    assert resumed.data_uri == f"{stack['storage']}/datasets/synth-small"
