"""Every stop leaves a record on the box's disk that says why (`fab status` shows it)."""

import datetime
import time

import pytest

from tests.fakes.fake_box import FakeBox

T0 = 1_800_000_000.0
MINUTE = 60.0
IDLE_LIMIT_MINUTES = 3
# The record's bounded write (5 s) and the rest of one look; blocked, it takes until the
# disk thaws (tests/fixtures/freezable_disk.py: 60 s here, forever on a dead volume).
STALLED_DISK_STOP_SECONDS = 15


@pytest.fixture
def box(tmp_path):
    return FakeBox(tmp_path, idle_shutdown_minutes=IDLE_LIMIT_MINUTES)


def _shutdown(box, now):
    """The glucose-stop-record unit's ExecStop, as the OS shuts down."""
    done = box.run("stop_records.py", now=now)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_an_idle_stop_says_what_the_watchdog_saw(box):
    box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES)
    (record,) = box.stops()
    assert record["by"] == "idle-watchdog"
    assert record["at"] == T0 + IDLE_LIMIT_MINUTES * MINUTE
    assert record["summary"] == "by the idle watchdog: 3 min with no trainer, GPU 0%, no SSH"


def test_a_retried_stop_is_recorded_once(box):
    for minute in (0, IDLE_LIMIT_MINUTES, IDLE_LIMIT_MINUTES + 5, IDLE_LIMIT_MINUTES + 10):
        box.tick(T0 + minute * MINUTE)
    assert len(box.calls("shutdown")) == 3
    assert len(box.stops()) == 1


def test_a_stop_that_cannot_be_recorded_still_happens(box):
    (box.box_root / "watchdog").write_text("not a directory: the disk is in a bad way")
    box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES)
    assert box.calls("shutdown") == [["-h", "now"]]


def test_a_stalled_disk_does_not_hold_up_the_stop(tmp_path, freezable_disk):
    disk = freezable_disk(tmp_path / "box")  # the box root, stops.jsonl's disk
    box = FakeBox(tmp_path, idle_shutdown_minutes=IDLE_LIMIT_MINUTES)
    for minute in range(IDLE_LIMIT_MINUTES):
        box.tick(T0 + minute * MINUTE)
    disk.freeze()
    began = time.monotonic()
    done = box.tick(T0 + IDLE_LIMIT_MINUTES * MINUTE)
    assert time.monotonic() - began < STALLED_DISK_STOP_SECONDS
    assert box.calls("shutdown") == [["-h", "now"]]
    assert "stop not recorded" in done.stdout


def test_the_shutdown_that_follows_a_watchdog_stop_records_when_billing_ended(box):
    box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES)
    _shutdown(box, T0 + 4 * MINUTE)
    _shutdown(box, T0 + 5 * MINUTE)  # the unit stopped twice in one boot adds nothing more
    watchdog, shutdown = box.stops()
    assert (shutdown["at"], shutdown["shutdown"]) == (T0 + 4 * MINUTE, True)
    assert (shutdown["by"], shutdown["summary"]) == (watchdog["by"], watchdog["summary"])


def test_a_shutdown_from_outside_is_recorded_as_such(box):
    box.tick(T0)
    _shutdown(box, T0 + MINUTE)
    assert box.stops()[-1]["by"] == "outside"


def test_the_daily_stop_is_named(tmp_path):
    box = FakeBox(tmp_path, daily_stop_time="23:00", daily_stop_time_zone="Europe/Berlin")
    berlin = datetime.datetime(
        2027, 1, 15, 23, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    _shutdown(box, berlin.timestamp())
    record = box.stops()[-1]
    assert (record["by"], record["summary"]) == (
        "daily-stop",
        "by the daily stop (23:00 Europe/Berlin)",
    )


def test_a_daily_stop_before_midnight_is_named_after_midnight(tmp_path):
    box = FakeBox(tmp_path, daily_stop_time="23:50", daily_stop_time_zone="Europe/Berlin")
    next_day = datetime.datetime(
        2027, 1, 16, 0, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    _shutdown(box, next_day.timestamp())
    assert box.stops()[-1]["summary"] == "by the daily stop (23:50 Europe/Berlin)"


def test_a_spot_eviction_is_named(box):
    box.write_status("run-1", state="preempted", updated_at=T0 - 30)
    _shutdown(box, T0)
    assert box.stops()[-1]["summary"] == "by a spot eviction (run run-1 was preempted)"


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_a_spot_eviction_of_a_box_without_a_run_is_named_from_the_clouds_notice(
    tmp_path, fake_metadata, cloud
):
    box = FakeBox(tmp_path, cloud=cloud, metadata_url=fake_metadata.url)
    if cloud == "aws":
        fake_metadata.spot_interruption()
    else:
        fake_metadata.azure_preempt()
    _shutdown(box, T0)
    record = box.stops()[-1]
    assert (record["by"], record["summary"]) == ("spot", "by a spot eviction (the cloud's notice)")


def test_a_shutdown_without_a_notice_is_not_called_a_spot_eviction(tmp_path, fake_metadata):
    box = FakeBox(tmp_path, cloud="azure", metadata_url=fake_metadata.url)
    _shutdown(box, T0)
    assert box.stops()[-1]["by"] == "outside"
    assert "budget stop" in box.stops()[-1]["summary"]


def test_a_reboot_is_named(box):
    box.set_systemd_jobs("1234 reboot.target start waiting")
    _shutdown(box, T0)
    assert box.stops()[-1]["by"] == "reboot"


def test_records_of_earlier_boots_do_not_explain_this_one(box):
    box.ticks_until_stop(T0, minutes=IDLE_LIMIT_MINUTES)
    box.reboot("boot-2", at=T0 + 3600)
    _shutdown(box, T0 + 7200)
    assert [record["by"] for record in box.stops()] == ["idle-watchdog", "outside"]
