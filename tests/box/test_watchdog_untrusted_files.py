"""The root watchdog reads what users write (run dirs, leases, labels) without trusting it."""

import json
import os
import time

import pytest

from tests.fakes.fake_box import DEEPLY_NESTED_JSON, FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
HUNG_LIMIT_MINUTES = 10
HUNG_STOP_BOUND_MINUTES = IDLE_LIMIT_MINUTES + HUNG_LIMIT_MINUTES + 2
# A look at the box takes well under a second here; a hang would take minutes.
ONE_LOOK_SECONDS = 20


@pytest.fixture
def box(tmp_path):
    box = FakeBox(
        tmp_path, idle_shutdown_minutes=IDLE_LIMIT_MINUTES, hung_trainer_minutes=HUNG_LIMIT_MINUTES
    )
    box.add_trainer("run-1", running=True, created_at=T0 - 3600)
    return box


def _trainer(state):
    (trainer,) = state["signals"]["trainers"]
    return trainer


def test_a_fifo_for_status_json_does_not_hang_the_watchdog(box):
    os.mkfifo(box.box_root / "runs" / "run-1" / "status.json")
    began = time.monotonic()
    box.tick(T0)
    assert time.monotonic() - began < ONE_LOOK_SECONDS
    assert _trainer(box.watchdog_state())["step"] is None


def test_a_symlinked_status_json_is_not_followed(box, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"step": 9, "updated_at": T0}))
    (box.box_root / "runs" / "run-1" / "status.json").symlink_to(elsewhere)
    assert _trainer(box.explain(T0))["step"] is None


def test_a_symlinked_run_dir_is_not_followed(box, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "status.json").write_text(json.dumps({"step": 9, "updated_at": T0}))
    (box.box_root / "runs" / "run-1").rmdir()
    (box.box_root / "runs" / "run-1").symlink_to(elsewhere)
    assert _trainer(box.explain(T0))["step"] is None


def test_an_updated_at_from_the_future_is_ignored_and_the_box_still_stops(box):
    box.write_status("run-1", step=5, updated_at=1e15, last_checkpoint_at=1e15)
    assert _trainer(box.explain(T0))["updated_at"] is None
    assert box.ticks_until_stop(T0, minutes=HUNG_STOP_BOUND_MINUTES) is not None


def test_an_oversized_status_json_is_not_read(box):
    padding = "x" * 100_000
    box.write_status("run-1", step=5, updated_at=T0, padding=padding)
    assert _trainer(box.explain(T0))["step"] is None


def test_a_deeply_nested_heartbeat_costs_only_its_own_run(box):
    box.add_trainer("run-2", running=True, created_at=T0 - 3600)
    box.write_status("run-2", step=7, updated_at=T0)
    (box.box_root / "runs" / "run-1" / "heartbeat.json").write_text(DEEPLY_NESTED_JSON)
    explained = box.explain(T0)
    trainers = {trainer["run_id"]: trainer for trainer in explained["signals"]["trainers"]}
    assert (trainers["run-1"]["step"], trainers["run-2"]["step"]) == (None, 7)
    assert explained["busy_reasons"] == ["trainer"]
    assert explained["signals"]["problems"] == []


def test_the_run_id_comes_from_the_container_name_not_its_label(box):
    box.add_trainer("run-2", running=True, created_at=T0, label="../../../etc")
    run_ids = [trainer["run_id"] for trainer in box.explain(T0)["signals"]["trainers"]]
    assert sorted(run_ids) == ["run-1", "run-2"]


def test_a_labelled_container_with_a_foreign_name_is_no_trainer(box):
    box.add_trainer("run-2", running=True, created_at=T0, name="cryptominer")
    run_ids = [trainer["run_id"] for trainer in box.explain(T0)["signals"]["trainers"]]
    assert run_ids == ["run-1"]
