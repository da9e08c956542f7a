"""One id grammar: `fab status`, `fab logs` and `fab stop` take a sweep's id and a trial's
by `--run ID`, as they take a run's.

The local target (a target file without hosts: this machine is the box) with the real
Docker engine: a sweep's driver is a container named and labelled as `fab sweep` names
it, a shell that prints as the driver does and exits 75 on SIGTERM (the driver's
checkpointed stop); a real `file://` store.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO
from trainer.storage import open_store

DRIVER = (
    "trap 'echo stopping; exit 75' TERM; echo \"sweep $0: trial 0 started\"; sleep 1000 & wait $!"
)


@pytest.fixture
def here(tmp_path: Path) -> dict:
    storage = f"file://{tmp_path / 'storage'}"
    box = tmp_path / "box"
    for folder in ("runs", "sweeps"):
        (box / folder).mkdir(parents=True)
    target = tmp_path / "here.json"
    target.write_text(json.dumps({"boxRoot": str(box), "storageUri": storage}))
    return {"target": target, "storage": storage, "box": box}


def _fab(here: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLUCOSE_TARGET": str(here["target"]), "COLUMNS": "200"}
    return subprocess.run([str(FAB), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def _put(folder: Path, **files: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        text = value if isinstance(value, str) else json.dumps(value)
        (folder / name.replace("_json", ".json").replace("_log", ".log")).write_text(text)


@pytest.fixture
def driver(here, docker_engine, probe_image) -> Iterator[str]:
    """A sweep whose driver's container runs on this machine; its id."""
    sweep = f"sw-{uuid.uuid4().hex[:8]}"
    _put(here["box"] / "sweeps" / sweep, sweep_json={"sweep_id": sweep})
    name = f"glucose-sweep-{sweep}"
    docker_engine.run(["run", "--detach", "--name", name, "--label",
                       f"glucose-training.sweep={sweep}", "--volume", "/usr:/usr:ro",
                       probe_image, "/bin/sh", "-c", DRIVER, sweep],
                      timeout_seconds=120)  # fmt: skip
    yield sweep
    docker_engine.run(["rm", "--force", name], timeout_seconds=120, check=False)


def test_status_of_a_sweeps_id_shows_its_state_and_trials(here):
    status = {"sweep_id": "sw-a", "state": "running", "step": 12, "updated_at": time.time(),
              "val_mae": 14.5, "trials": {"of": 8, "complete": 2, "running": 1}}  # fmt: skip
    _put(here["box"] / "sweeps" / "sw-a", sweep_json={}, status_json=status)
    shown = _fab(here, "status", "--run", "sw-a")
    assert shown.returncode == 0, shown.stderr
    assert "sweep:      sw-a" in shown.stdout
    assert "trials:     2 complete, 1 running (of 8)" in shown.stdout
    assert "best:       validation MAE 14.50 mg/dL" in shown.stdout
    assert "ranked:     `fab runs --sweep sw-a`" in shown.stdout


def test_status_of_a_trial_names_its_sweep(here):
    _put(here["box"] / "runs" / "sw-a-t001", launch_json={"sweep": "sw-a", "trial": 1},
         status_json={"state": "running", "step": 4})  # fmt: skip
    shown = _fab(here, "status", "--run", "sw-a-t001")
    assert shown.returncode == 0, shown.stderr
    assert "state:      running" in shown.stdout
    assert "run sw-a-t001 is trial 1 of sweep sw-a" in shown.stdout
    assert "`fab status --run sw-a`" in shown.stdout


def test_logs_of_a_sweeps_id_are_its_drivers_live(here, driver):
    deadline, shown = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        shown = _fab(here, "logs", "--run", driver)
        if "trial 0 started" in shown.stdout:
            break
        time.sleep(1)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"sweep {driver}: trial 0 started\n"


@pytest.mark.parametrize("spelling", ["sweep", "trial"])
def test_stop_of_a_sweeps_or_a_trials_id_stops_the_sweep(here, driver, spelling):
    named = driver
    if spelling == "trial":
        named = f"{driver}-t000"
        _put(here["box"] / "runs" / named, launch_json={"sweep": driver, "trial": 0})
    stopped = _fab(here, "stop", "--run", named)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == (
        f"sweep {driver} stopped (exit 75); resume: fab sweep --sweep {driver}\n"
    )
    assert (here["box"] / "sweeps" / driver / "STOPPED_BY_USER").exists()
    if spelling == "trial":
        assert f"run {named} is trial 0 of sweep {driver}" in stopped.stderr


def test_the_old_spelling_of_a_sweeps_stop_still_stops_it(here, driver):
    stopped = _fab(here, "sweep", "--stop", "--sweep", driver)
    assert stopped.returncode == 0, stopped.stderr
    assert f"sweep {driver} stopped (exit 75)" in stopped.stdout


def test_a_sweep_no_container_holds_shows_its_stored_log_and_refuses_to_follow(here):
    store = open_store(here["storage"])
    store.write_bytes("sweeps/sw-old/sweep.json", b"{}")
    store.write_bytes("sweeps/sw-old/train.log", b"sweep sw-old: trial 0 finished\n")
    shown = _fab(here, "logs", "--run", "sw-old", "--follow")
    assert shown.stdout == "sweep sw-old: trial 0 finished\n"
    assert_one_line_error(shown, "--follow: no container holds sweep sw-old", "nothing adds")


def test_a_trials_log_comes_from_its_folder_on_the_box_and_follow_names_its_sweep(here):
    _put(here["box"] / "runs" / "sw-a-t002", launch_json={"sweep": "sw-a", "trial": 2},
         train_log="epoch 1: val MAE 19\nepoch 2: val MAE 17\n")  # fmt: skip
    shown = _fab(here, "logs", "--run", "sw-a-t002", "--tail", "1", "--follow")
    assert shown.stdout == "epoch 2: val MAE 17\n"
    assert_one_line_error(
        shown, "run sw-a-t002 is trial 2 of sweep sw-a", "fab logs --follow --run sw-a"
    )
