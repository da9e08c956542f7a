"""The idle countdown: the real watchdog program, one run per simulated minute."""

import json
from pathlib import Path

import pytest

from tests.fakes.fake_box import FakeBox, box_python

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, cloud="aws", idle_shutdown_minutes=IDLE_LIMIT_MINUTES)


def test_busy_training_never_stops(box):
    box.add_trainer("run-1", running=True, created_at=T0 - 600)
    box.set_gpu(97)
    for minute in range(0, 4 * IDLE_LIMIT_MINUTES + 1, IDLE_LIMIT_MINUTES):
        box.write_status("run-1", step=100 * minute, updated_at=T0 + minute * MINUTE)
        box.tick(T0 + minute * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["busy_reasons"] == ["gpu", "trainer"]


def test_idle_box_is_not_stopped_before_the_limit(box):
    for second in (0, 60, 120, 179):
        box.tick(T0 + second)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["decision"] == "idle"


def test_idle_box_stops_exactly_at_the_limit(box):
    for second in (0, 60, 120):
        box.tick(T0 + second)
    box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert box.calls("shutdown") == [["-h", "now"]]
    assert box.watchdog_state()["stop_method"] == "os-shutdown"


def test_idle_since_survives_a_watchdog_restart(box):
    box.tick(T0)
    # Each tick is a fresh process, as systemd starts it: only state.json remembers.
    box.tick(T0 + 2 * MINUTE)
    assert box.watchdog_state()["idle_since"] == T0
    box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert len(box.calls("shutdown")) == 1


def test_the_state_is_linked_where_fab_status_reads_it(box):
    # A file there from before the state moved to /run is replaced by the link.
    (box.box_root / "watchdog").mkdir()
    (box.box_root / "watchdog" / "state.json").write_text('{"decision": "stale"}')
    box.tick(T0)
    link = box.box_root / "watchdog" / "state.json"
    assert link.readlink() == box.state_path
    assert json.loads(link.read_text())["checked_at"] == T0


def test_state_shows_the_countdown(box):
    box.tick(T0)
    box.tick(T0 + MINUTE)
    state = box.watchdog_state()
    assert state["stop_at"] == T0 + IDLE_LIMIT_MINUTES * MINUTE
    assert state["idle_shutdown_minutes"] == IDLE_LIMIT_MINUTES
    assert state["checked_at"] == T0 + MINUTE


def test_activity_restarts_the_countdown(box):
    box.tick(T0)
    box.set_gpu(60)
    box.tick(T0 + 2 * MINUTE)
    box.set_gpu(0)
    box.tick(T0 + 3 * MINUTE)
    box.tick(T0 + 5 * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["idle_since"] == T0 + 3 * MINUTE


def test_a_reboot_starts_the_countdown_over(box):
    box.tick(T0)
    box.reboot("boot-2")
    box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["idle_since"] == T0 + IDLE_LIMIT_MINUTES * MINUTE


def test_a_long_silence_of_the_watchdog_starts_the_countdown_over(box):
    box.tick(T0)
    box.tick(T0 + 20 * MINUTE)
    assert box.calls("shutdown") == []
    assert box.watchdog_state()["idle_since"] == T0 + 20 * MINUTE


@pytest.mark.parametrize("step_minutes", [-120, 60], ids=["back-2h", "forward-1h"])
def test_a_clock_step_neither_restarts_nor_hastens_the_countdown(box, step_minutes):
    box.tick(T0)
    box.tick(T0 + MINUTE)
    step = step_minutes * MINUTE
    box.step_clock(step)
    box.tick(T0 + 2 * MINUTE + step)
    assert box.calls("shutdown") == []
    box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE + step)
    assert box.calls("shutdown") == [["-h", "now"]]
    assert box.watchdog_state()["idle_since"] == T0 + step


def test_the_boots_own_clock_is_the_kernels_uptime(tmp_path):
    box = FakeBox(tmp_path, proc_root="/proc")
    done = box.run("watchdog.py", "--explain")  # the real clocks
    assert done.returncode == 0, done.stderr
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert uptime - 10 < json.loads(done.stdout)["checked_uptime"] <= uptime


def test_a_requested_stop_is_not_repeated_every_minute(box):
    for minute in (0, IDLE_LIMIT_MINUTES, IDLE_LIMIT_MINUTES + 1, IDLE_LIMIT_MINUTES + 4):
        box.tick(T0 + minute * MINUTE)
    assert len(box.calls("shutdown")) == 1


def test_a_stop_that_did_not_happen_is_retried(box):
    # Stop requests are at least 5 minutes apart (idle_decision.STOP_RETRY_SECONDS).
    for minute in (0, IDLE_LIMIT_MINUTES, IDLE_LIMIT_MINUTES + 4, IDLE_LIMIT_MINUTES + 5):
        box.tick(T0 + minute * MINUTE)
    assert len(box.calls("shutdown")) == 2


def test_every_decision_is_logged_with_its_signals(box):
    box.add_session("alice", "pts/1")
    done = box.tick(T0)
    assert "decision=busy busy=ssh" in done.stdout
    assert "gpu=[0]" in done.stdout
    assert "alice@pts/1" in done.stdout


def test_a_bad_config_is_one_line_without_traceback(box):
    box.config_file.write_text('{"cloud": "gcp", "idle_shutdown_minutes": 30}')
    done = box.run("watchdog.py", now=T0)
    assert done.returncode == 2
    assert "cloud is 'gcp'" in done.stderr
    assert "Traceback" not in done.stderr
    assert box.calls("shutdown") == []


def test_watchdog_runs_on_python_3_10(box):
    python = box_python()
    if python is None:
        pytest.skip("no python3.10 here to check the box programs' compatibility")
    box.tick(T0)
    done = box.run("watchdog.py", now=T0 + IDLE_LIMIT_MINUTES * MINUTE, python=python)
    assert done.returncode == 0, done.stderr
    assert box.calls("shutdown") == [["-h", "now"]]


def test_a_box_named_by_its_old_seams_alone_keeps_the_countdown_under_its_box_root(tmp_path):
    # Checks outside this repo drive the real watchdog through box_root, proc_root and
    # boot_id_path, with no state_path: the countdown goes with box_root, not to /run.
    box = FakeBox(tmp_path, cloud="aws", idle_shutdown_minutes=IDLE_LIMIT_MINUTES)
    seams = {k: v for k, v in box.settings.items() if not k.endswith("state_path")}
    box.config_file.write_text(json.dumps(seams))
    for second in (0, 60, 120):
        box.tick(T0 + second)
    assert box.calls("shutdown") == []
    box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert box.calls("shutdown") == [["-h", "now"]]
    state = json.loads((box.box_root / "watchdog" / "watchdog-state.json").read_text())
    assert state["decision"] == "stop"
    assert (box.box_root / "watchdog" / "state.json").resolve().name == "watchdog-state.json"
