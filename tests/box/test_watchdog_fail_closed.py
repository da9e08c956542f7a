"""The watchdog fails closed: what it cannot save, read or wait for never keeps a box up."""

import configparser
import time

import pytest

from box import watchdog
from tests.fakes.fake_box import BOX_DIR, FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
STOP_BOUND_MINUTES = IDLE_LIMIT_MINUTES + 2


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, idle_shutdown_minutes=IDLE_LIMIT_MINUTES)


@pytest.fixture
def box_without_state(tmp_path):
    # A state path below a regular file cannot be written, like a full or read-only disk.
    (tmp_path / "full-disk").write_text("")
    return FakeBox(
        tmp_path / "box",
        idle_shutdown_minutes=IDLE_LIMIT_MINUTES,
        state_path=str(tmp_path / "full-disk" / "watchdog-state.json"),
    )


def test_an_unwritable_countdown_still_stops_an_idle_box(box_without_state):
    box_without_state.reboot("boot-2", at=T0)
    stopped = box_without_state.ticks_until_stop(T0, minutes=STOP_BOUND_MINUTES)
    assert stopped is not None
    assert box_without_state.calls("shutdown") == [["-h", "now"]]


def test_an_unwritable_countdown_counts_from_the_boot_not_from_now(box_without_state):
    box_without_state.reboot("boot-2", at=T0)
    done = box_without_state.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert "cannot save the countdown" in done.stdout
    assert box_without_state.calls("shutdown") == [["-h", "now"]]


def test_an_unwritable_countdown_leaves_a_busy_box_alone(box_without_state):
    box_without_state.reboot("boot-2", at=T0)
    box_without_state.add_session("alice")
    box_without_state.tick(T0 + 60 * MINUTE)
    assert box_without_state.calls("shutdown") == []


def test_a_hung_nvidia_smi_cannot_freeze_the_watchdog(box):
    box.hang("nvidia-smi")
    began = time.monotonic()
    done = box.tick(T0)
    assert time.monotonic() - began < 20  # nvidia-smi's limit is 10 s
    assert "nvidia-smi: no answer within 10s" in done.stdout
    assert box.watchdog_state()["decision"] == "idle"


def test_the_worst_case_run_fits_the_units_timeout():
    unit = configparser.ConfigParser(strict=False)
    unit.read(BOX_DIR / "glucose-watchdog.service")
    assert int(unit["Service"]["TimeoutStartSec"]) > watchdog.WORST_CASE_SECONDS


def test_explain_prints_the_decision_and_acts_on_nothing(box):
    box.tick(T0)
    before = box.state_path.read_text()
    explained = box.explain(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert explained["decision"] == "stop"
    assert explained["would_request_stop"] is True
    assert explained["idle_since"] == T0
    assert explained["stop_at"] == T0 + IDLE_LIMIT_MINUTES * MINUTE
    assert box.calls("shutdown") == []
    assert box.state_path.read_text() == before
    assert box.stops() == []


def test_explain_names_the_busy_reasons_and_hung_runs(box):
    box.add_session("alice")
    box.add_trainer("run-1", running=True, created_at=T0 - 10 * 3600)
    explained = box.explain(T0)
    assert explained["busy_reasons"] == ["ssh"]
    assert explained["hung_run_ids"] == ["run-1"]
