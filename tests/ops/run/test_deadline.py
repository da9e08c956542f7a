"""A run's deadline: the next daily stop, or `--hours` from now within maxRunHours."""

from __future__ import annotations

import datetime

import pytest
from invoke.exceptions import Exit

from ops.run import deadline
from ops.target.resolve import from_outputs

UTC = datetime.timezone.utc


def _target(**more):
    return from_outputs(
        {
            "cloud": "aws",
            "hosts": ["127.0.0.1"],
            "sshUser": "ubuntu",
            "storageUri": "s3://bucket",
            "autoShutdownTime": "20:00",
            "autoShutdownTimeZone": "Europe/Berlin",
            "maxRunHours": 72,
            **more,
        },
        "stack test",
    )


def _at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_next_daily_stop_is_tonights_in_the_stacks_zone():
    # 20:00 in Berlin is 19:00 UTC in winter.
    assert deadline.next_daily_stop(_target(), _at("2026-11-23T10:00")) == _at("2026-11-23T19:00")


def test_after_tonights_stop_the_next_is_tomorrows():
    assert deadline.next_daily_stop(_target(), _at("2026-11-23T19:30")) == _at("2026-11-24T19:00")


def test_the_next_daily_stop_follows_daylight_saving():
    # 20:00 in Berlin is 18:00 UTC in summer.
    assert deadline.next_daily_stop(_target(), _at("2026-07-01T10:00")) == _at("2026-07-01T18:00")


def test_without_hours_the_deadline_is_the_daily_stop_and_nothing_moves():
    found = deadline.run_deadline(_target(), _at("2026-11-23T10:00"), None)
    assert found.until == _at("2026-11-23T19:00")
    assert not found.past_daily_stop


def test_hours_past_the_daily_stop_move_it():
    found = deadline.run_deadline(_target(), _at("2026-11-23T10:00"), 30)
    assert found.until == _at("2026-11-24T16:00")
    assert found.past_daily_stop


def test_hours_within_the_day_leave_the_daily_stop_alone():
    assert not deadline.run_deadline(_target(), _at("2026-11-23T10:00"), 2).past_daily_stop


def test_hours_past_max_run_hours_are_refused_in_one_line_naming_the_setting():
    with pytest.raises(Exit, match=r"--hours 100 is past this stack's maxRunHours \(72\)"):
        deadline.run_deadline(_target(), _at("2026-11-23T10:00"), 100)


@pytest.mark.parametrize("text", ["0", "-3", "soon", "nan", "inf"])
def test_hours_that_are_no_positive_number_are_refused(text):
    with pytest.raises(Exit, match=r"--hours is .*expected a duration such as 90m, 2h"):
        deadline.parse_hours(text)


def test_auto_hours_leave_room_beyond_the_plan():
    assert deadline.auto_hours(8.6) == 12.0


def test_a_run_that_would_cross_the_daily_stop_is_warned_with_the_hours_to_ask_for():
    warning = deadline.crossing_warning(_target(), _at("2026-11-23T15:00"), 8.6)
    assert "needs about 8.6 h" in warning
    assert "in 4.0 h" in warning
    assert "`--hours 12`" in warning


def test_a_run_that_ends_before_the_daily_stop_is_not_warned():
    assert deadline.crossing_warning(_target(), _at("2026-11-23T08:00"), 8.6) is None


def test_the_suggested_hours_never_exceed_max_run_hours():
    warning = deadline.crossing_warning(_target(maxRunHours=10), _at("2026-11-23T15:00"), 8.6)
    assert "`--hours 10`" in warning


@pytest.mark.parametrize(
    ("text", "hours"), [("90m", 1.5), ("2h", 2.0), ("1h30m", 1.5), ("1.5", 1.5)]
)
def test_hours_read_durations_as_every_flag_does(text, hours):
    assert deadline.parse_hours(text) == hours
