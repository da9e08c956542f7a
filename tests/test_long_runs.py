"""A run longer than the day finishes with no command typed after `fab train` (issue 24).

One AWS spot box over simulated days (tests/fakes/long_run.py): the deadline `fab
train --hours` sets through the real ops code into moto's Scheduler, the box's real
programs on the simulated clock, a stand-in trainer. What a researcher needs of it: the
run ends finished, the nights' stops do not cut it, an eviction costs only the time the
box was away, the dollars are the box's up time, and nothing bills past the deadline
longer than the idle limit and two minutes.
"""

from __future__ import annotations

import datetime
import json
import time

import pytest

from ops.target.resolve import from_outputs
from tests.fakes.fake_box import FakeBox
from tests.fakes.long_run import HOUR, MINUTE, Eviction, LongRunWorld, StandInRun, schedule_fires
from tests.fixtures.clouds import (
    DAILY,
    STOP_TARGET,
    set_deadline_as_fab_train_does,
    target_outputs,
)
from trainer.reports import cost

pytestmark = pytest.mark.e2e  # moto, and a few hundred runs of the box's programs
IDLE_MINUTES = 3  # the FakeBox's idle limit


def _stack(scheduler, first_stop_in_hours: float):
    """A spot stack whose daily stop is `first_stop_in_hours` from now, in UTC, with the
    cloud's daily schedule at that time, as `pulumi up` declares it: the fixture's own
    (20:00 in Berlin) would stop the run at an hour the stack does not say, so what the
    test saw depended on the hour it ran at."""
    stop = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        hours=first_stop_in_hours
    )
    scheduler.update_schedule(
        Name=DAILY,
        ScheduleExpression=f"cron({stop.minute} {stop.hour} * * ? *)",
        ScheduleExpressionTimezone="UTC",
        FlexibleTimeWindow={"Mode": "OFF"},
        State="ENABLED",
        Target=STOP_TARGET,
    )
    outputs = target_outputs(
        "aws",
        ["i-0123456789abcdef0"],
        spot=True,
        dailyStopSchedules=[DAILY],
        autoShutdownTime=f"{stop:%H:%M}",
        autoShutdownTimeZone="UTC",
        maxRunHours=72,
    )
    return from_outputs(outputs, "stack test")


def _schedules(scheduler) -> list[dict]:
    names = [s["Name"] for s in scheduler.list_schedules()["Schedules"]]
    return [scheduler.get_schedule(Name=name) for name in names]


def _world(tmp_path, scheduler, hours: float, first_stop_in: float, steps: int, evictions):
    """The box up and the run started now, its deadline `hours` away as fab sets it."""
    target = _stack(scheduler, first_stop_in)
    set_at = time.time()
    # The box is a stand-in, not one of moto's: the warning that EC2 has no request for
    # it is moot here.
    found = set_deadline_as_fab_train_does(
        target, "s3://unused/datasets/d", 0, str(hours), list().append
    )
    box = FakeBox(tmp_path, idle_shutdown_minutes=IDLE_MINUTES, hung_trainer_minutes=30)
    world = LongRunWorld(box, StandInRun("long", steps), _schedules(scheduler), evictions)
    world.power_on(set_at - MINUTE)
    world.start(set_at, found.until.timestamp())
    return world, set_at, found.until.timestamp()


def _billed_after(world: LongRunWorld, moment: float) -> float:
    return sum(max(0.0, off - max(on, moment)) for on, off in world.billed)


def test_a_thirty_hour_run_over_two_nights_and_an_eviction_finishes_by_itself(tmp_path, scheduler):
    # The nights' stops come 5 h and 29 h in; a spot eviction at 12 h, capacity back
    # 45 min later; 29 h of training; a deadline of 36 h.
    start = time.time()
    eviction = Eviction(start + 12 * HOUR, start + 12 * HOUR + 45 * MINUTE)
    world, start, until = _world(tmp_path, scheduler, 36, 5, 29 * 60, [eviction])
    world.run_until(start, start + 40 * HOUR)

    status = json.loads((world.box.box_root / "runs/long/status.json").read_text())
    assert (status["state"], status["step"]) == ("finished", 29 * 60)
    assert [by for _, by in world.stops] == ["spot interruption", "idle watchdog"]
    assert status["recoveries"] == 1
    assert 45 * MINUTE <= status["time_lost_s"] <= 47 * MINUTE
    assert world.run.finished_at < start + 30 * HOUR
    assert _billed_after(world, until) == 0


def test_the_runs_dollars_are_the_boxs_up_time_from_its_own_records(tmp_path, scheduler):
    start = time.time()
    eviction = Eviction(start + 2 * HOUR, start + 3 * HOUR)
    world, start, _ = _world(tmp_path, scheduler, 6, 1, 4 * 60, [eviction])
    world.run_until(start, start + 8 * HOUR)

    records = world.box.box_root / "watchdog"
    up = cost.uptimes(
        cost.records_of(records / "boots.jsonl"), cost.records_of(records / "stops.jsonl")
    )
    counted = cost.run_cost([up], [(start, world.stops[-1][0] + HOUR)], 1.0)
    billed = sum(off - on for on, off in world.billed) - MINUTE  # up before the start
    assert counted.box_seconds[0] == pytest.approx(billed, abs=2 * MINUTE)
    assert counted.box_seconds[0] < 6 * HOUR  # not the 8 h since the start


def test_the_nights_stop_comes_back_after_the_deadline(tmp_path, scheduler):
    world, start, until = _world(tmp_path, scheduler, 30, 5, 10, [])

    def fires(begin: float, end: float) -> list[float]:
        return sorted(f for s in world.schedules for f in schedule_fires(s, begin, end))

    assert fires(start, until + 1) == [until]  # the deadline's own stop, no night's
    # The first night's stop after the deadline, within a day of it (a 25 h window holds
    # two of a daily stop when the deadline falls in the hour before its time).
    next_night = fires(until + 1, until + 25 * HOUR)[0]
    assert until < next_night <= until + 24 * HOUR


def test_capacity_back_after_the_deadline_bills_at_most_the_idle_limit_and_two_minutes(
    tmp_path, scheduler
):
    start = time.time()
    eviction = Eviction(start + 2 * HOUR, start + 4 * HOUR)  # the deadline is at 3 h
    world, start, until = _world(tmp_path, scheduler, 3, 10, 10 * 60, [eviction])
    world.run_until(start, start + 6 * HOUR)

    status = json.loads((world.box.box_root / "runs/long/status.json").read_text())
    assert status["state"] == "preempted"  # not started again past its deadline
    assert world.stops[-1][1] == "idle watchdog"
    assert _billed_after(world, until) <= (IDLE_MINUTES + 2) * MINUTE
