"""What `fab` does for the box's idle guard: leases, `fab hold`, and what status shows."""

import json
import time

import pytest

from ops.remote.ssh import Box
from ops.run import launch
from ops.run import status as run_status
from ops.target.resolve import load_target_file
from tests.ops.conftest import assert_one_line_error


@pytest.fixture
def box_env(local_box, monkeypatch):
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    monkeypatch.setenv("GLUCOSE_BOOT_WAIT_SECONDS", "10")
    return local_box


@pytest.fixture
def box_with_engine(box_env, docker_engine):
    """A box whose `docker` answers, as `fab status` needs: this machine's engine. Using
    it puts a test in the docker xdist group, so no other test's trainer container is
    on the engine meanwhile to be taken for this box's newest run."""
    return box_env


def _lease(box_env, name):
    path = box_env.root / "leases" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _write_watchdog_state(box_env, **state):
    (box_env.root / "watchdog" / "state.json").write_text(json.dumps(state))


def test_hold_leases_the_box_for_the_asked_time_on_its_clock(box_env):
    result = box_env.fab("hold", "2h")
    assert result.returncode == 0, result.stderr
    lease = _lease(box_env, "hold")
    assert lease["minutes"] == 120
    assert abs(lease["written_at"] - time.time()) < 60
    assert "held up until" in result.stdout


def test_hold_zero_ends_the_hold(box_env):
    box_env.fab("hold", "90m")
    result = box_env.fab("hold", "0")
    assert result.returncode == 0, result.stderr
    assert _lease(box_env, "hold") is None


def test_hold_beyond_the_cap_is_refused(box_env):
    assert_one_line_error(box_env.fab("hold", "13h"), "over the 12h cap")
    assert _lease(box_env, "hold") is None


def test_hold_with_a_duration_it_cannot_read_is_refused(box_env):
    assert_one_line_error(
        box_env.fab("hold", "2 weeks"),
        "fab hold is '2 weeks', expected a duration such as 90m, 2h or 1h30m",
        "pass e.g. fab hold 90m",
    )


def test_train_start_up_is_leased_and_the_lease_released_after(box_env):
    box = Box(load_target_file(box_env.target_file))
    with launch.start_up_leases([box], "r1") as renew:
        assert _lease(box_env, "train-r1")["minutes"] == launch.START_UP_LEASE_MINUTES
        renew()
        assert "fab train --run r1" in _lease(box_env, "train-r1")["reason"]
    assert _lease(box_env, "train-r1") is None


def test_a_failed_start_up_releases_its_lease_too(box_env):
    box = Box(load_target_file(box_env.target_file))
    with pytest.raises(RuntimeError), launch.start_up_leases([box], "r1"):
        raise RuntimeError("image pull failed")
    assert _lease(box_env, "train-r1") is None


def test_status_without_a_run_still_shows_the_box_guard(box_with_engine):
    _write_watchdog_state(
        box_with_engine, decision="idle", busy_reasons=[], stop_at=time.time() + 600
    )
    result = box_with_engine.fab("status")
    assert result.returncode == 0, result.stderr
    assert "run:        none on" in result.stdout
    assert "stops itself (and its bill) in 10 min" in result.stdout


def test_status_shows_a_hold_and_its_end(box_with_engine):
    until = time.time() + 3600
    lease = {"name": "hold", "reason": "fab hold 1h", "until": until}
    _write_watchdog_state(box_with_engine, busy_reasons=["lease"], signals={"leases": [lease]})
    out = box_with_engine.fab("status").stdout
    # HH:MM, with the date in front when the hour ends after midnight.
    assert f"box held up until {run_status.clock(until, time.time())}" in out


def test_status_says_still_billed_when_the_stop_failed(box_with_engine):
    _write_watchdog_state(
        box_with_engine,
        decision="stop",
        busy_reasons=[],
        stop_failures=3,
        stop_error="POST .../deallocate: HTTP 403",
        stop_requested_at=time.time() - 120,
    )
    out = box_with_engine.fab("status").stdout
    assert "STILL BILLED" in out
    assert "HTTP 403" in out


def test_status_says_why_the_box_last_stopped_in_one_line(box_with_engine):
    stopped_at = time.time() - 3600
    record = {
        "at": stopped_at,
        "boot_id": "b",
        "by": "idle-watchdog",
        "summary": "by the idle watchdog: 30 min with no trainer, GPU 0%, no SSH",
    }
    (box_with_engine.root / "watchdog" / "stops.jsonl").write_text(json.dumps(record) + "\n")
    out = box_with_engine.fab("status").stdout
    stamp = time.strftime("%H:%M", time.localtime(stopped_at))
    assert any(
        line.startswith("last stop:") and stamp in line and line.endswith("GPU 0%, no SSH")
        for line in out.splitlines()
    ), out


def test_a_failed_setup_is_reported_at_once_not_after_the_boot_wait(box_env):
    (box_env.root / "ready").unlink()
    (box_env.root / "failed").write_text(
        "setup failed at 2026-11-22T03:00:00Z (exit 100); the idle watchdog is on.\n"
        "--- last 40 lines of setup.log ---\nE: Unable to locate package awscli\n"
    )
    box_env.env["GLUCOSE_BOOT_WAIT_SECONDS"] = "60"
    started = time.monotonic()
    result = box_env.fab("status")
    assert time.monotonic() - started < 30
    assert_one_line_error(result, "failed to set up", "exit 100")
    assert "E: Unable to locate package awscli" in result.stderr
