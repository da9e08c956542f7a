"""A run's dollars are the time its boxes were up while it lived, times their price."""

from __future__ import annotations

import json

import pytest

from trainer.reports import cost
from trainer.reports.status import RunRecord
from trainer.sweep.spec import SweepSpec

HOUR = 3600.0
MONDAY = 1_800_000_000.0  # a scripted week starts here
PRICE = 3.0


def _week() -> tuple[list[dict], list[dict]]:
    """Mon 09-23 (daily stop), Tue 09-12 (idle stop), Tue 14-Wed 03 (spot eviction),
    Wed 08-? up now. Boot ids are the kernel's; the records are the box's files."""
    days = [
        ("mon", 9, 23),
        ("tue-am", 33, 36),
        ("tue-pm", 38, 51),
    ]
    boots = [{"at": MONDAY + start * HOUR, "boot_id": name} for name, start, _ in days]
    stops = [{"at": MONDAY + end * HOUR, "boot_id": name, "by": "x"} for name, _, end in days]
    boots.append({"at": MONDAY + 56 * HOUR, "boot_id": "wed"})
    return boots, stops


def test_a_week_of_boots_and_stops_bills_only_the_hours_the_box_was_up():
    boots, stops = _week()
    now = MONDAY + 60 * HOUR  # Wednesday 12:00, up since 08:00
    up = cost.uptimes(boots, stops, current=("wed", MONDAY + 56 * HOUR))
    billed = cost.run_cost([up], [(MONDAY, now)], PRICE)
    assert billed.box_seconds == ((14 + 3 + 13 + 4) * HOUR,)
    assert billed.usd == pytest.approx(34 * PRICE)


def test_a_finished_run_costs_no_more_as_time_goes_on():
    boots, stops = _week()
    up = cost.uptimes(boots, stops, current=("wed", MONDAY + 56 * HOUR))
    finished = MONDAY + 40 * HOUR  # Tuesday 16:00
    later = [cost.run_cost([up], [(MONDAY, finished)], PRICE).usd for _ in range(2)]
    assert later[0] == later[1] == pytest.approx((14 + 3 + 2) * PRICE)


def test_only_the_part_of_a_boot_inside_the_run_counts():
    up = [cost.Uptime(0.0, 10 * HOUR)]
    assert cost.billed_seconds(up, 4 * HOUR, 6 * HOUR) == 2 * HOUR
    assert cost.billed_seconds(up, 12 * HOUR, 20 * HOUR) == 0.0


def test_a_boot_without_a_stop_record_counts_until_the_next_boot_at_most():
    # A crash leaves no stop record: the box billed no longer than until it came back.
    boots = [{"at": 0.0, "boot_id": "a"}, {"at": 5 * HOUR, "boot_id": "b"}]
    stops = [{"at": 6 * HOUR, "boot_id": "b"}]
    up = cost.uptimes(boots, stops)
    assert [(u.booted_at, u.stopped_at) for u in up] == [(0.0, 5 * HOUR), (5 * HOUR, 6 * HOUR)]


def test_every_box_of_a_run_bills():
    one = [cost.Uptime(0.0, 2 * HOUR)]
    other = [cost.Uptime(0.0, 1 * HOUR)]
    assert cost.run_cost([one, other], [(0.0, 10 * HOUR)], PRICE).usd == pytest.approx(9.0)


def test_torn_and_foreign_record_lines_are_skipped():
    text = '{"at": 1, "boot_id": "a"}\n{"at": \n["list"]\n{"boot_id": "b"}\n'
    assert cost.records(text) == [{"at": 1, "boot_id": "a"}]


def test_the_trainer_counts_its_run_from_launch_json_and_its_boxs_records(tmp_path, monkeypatch):
    run_dir, records = tmp_path / "run", tmp_path / "box"
    run_dir.mkdir()
    records.mkdir()
    launch = {"started_at": MONDAY + 10 * HOUR, "hourly_price_usd": PRICE, "boxes": 2}
    (run_dir / "launch.json").write_text(json.dumps(launch))
    boots, stops = _week()
    (records / "boots.jsonl").write_text("".join(json.dumps(b) + "\n" for b in boots[:3]))
    (records / "stops.jsonl").write_text("".join(json.dumps(s) + "\n" for s in stops))
    monkeypatch.setenv(cost.RECORDS_ENV, str(records))
    monkeypatch.setattr(cost, "current_boot", lambda: None)
    billed = cost.box_run_cost(run_dir, MONDAY + 60 * HOUR)
    assert billed.box_seconds == ((13 + 3 + 13) * HOUR,) * 2
    assert billed.usd == pytest.approx(2 * 29 * PRICE)


def test_a_run_off_a_box_has_no_cost_to_count(tmp_path, monkeypatch):
    monkeypatch.delenv(cost.RECORDS_ENV, raising=False)
    assert cost.box_run_cost(tmp_path, MONDAY) is None


def test_a_start_after_an_eviction_is_a_recovery_with_the_time_it_lost():
    evicted = RunRecord(state="preempted", updated_at=MONDAY, recoveries=1, time_lost_s=60.0)
    assert evicted.after_restart(MONDAY + 600) == {"recoveries": 2, "time_lost_s": 660.0}


def test_a_start_after_a_box_died_under_a_running_run_is_a_recovery():
    assert RunRecord(state="running", updated_at=MONDAY).after_restart(MONDAY + 30) == {
        "recoveries": 1,
        "time_lost_s": 30.0,
    }


def test_a_start_after_a_stop_the_run_asked_for_is_no_recovery():
    stopped = RunRecord(state="stopped", updated_at=MONDAY, recoveries=1, time_lost_s=5.0)
    assert stopped.after_restart(MONDAY + 3600) == {"recoveries": 1, "time_lost_s": 5.0}


def test_the_report_says_what_the_boxes_billed_and_what_recoveries_took():
    from trainer.reports.report import cost_line

    summary = {
        "cost_usd": 12.6,
        "cost": {"usd": 12.6, "box_hours": [10.5], "hourly_price_usd": 1.2},
        "recoveries": 1,
        "time_lost_s": 2700.0,
    }
    assert cost_line(summary) == (
        "Cost $12.60: 10.50 box-hours up at $1.20/h (the boxes' own boot and stop records). "
        "Came back 1 time(s) after a stop it did not ask for; 0.75 h lost."
    )


def test_the_report_of_a_run_off_a_box_says_its_cost_was_not_counted():
    from trainer.reports.report import cost_line

    assert cost_line({"cost_usd": None, "cost": None, "recoveries": 0}).startswith(
        "Cost: not counted"
    )


def test_a_trial_shares_the_box_with_its_own_sweeps_trials_only():
    ran = RunRecord(ran=[[0.0, HOUR]])
    statuses = {"sw-t000": ran, "sw-t001": ran, "sw-t1x": ran, "swept-t000": ran, "other": ran}
    assert cost.trial_spans("sw-t000", "sw", statuses) == [(0.0, HOUR)]
    assert cost.trial_spans("plain", None, statuses) == []


def test_a_trial_is_known_by_the_run_id_its_sweep_gives_it():
    spec = SweepSpec(sweep_id="sw", dataset="d", data_dir="/d", runs_dir="/r",
                     storage_uri="file:///s", params=["lr=0.1"])  # fmt: skip
    assert all(cost.is_trial_of(spec.trial_run_id(n), "sw") for n in (0, 7, 123, 4567))
