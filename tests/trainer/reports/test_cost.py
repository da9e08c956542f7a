"""A run's dollars are the time its boxes were up while it lived, times their price."""

from __future__ import annotations

import json

import pytest

from box import contract
from box.contract import RunRecord
from trainer.reports import cost

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


def test_runs_on_a_box_at_once_split_each_moment_and_add_up_to_what_it_billed():
    # A plain run 0-2 h, a sweep's trial 1-3 h, another trial 2-3 h, on a box up 0-3 h.
    statuses = {
        "plain": RunRecord(ran=[[0.0, 2 * HOUR]]),
        "sw-t000": RunRecord(ran=[[HOUR, 3 * HOUR]]),
        "sw-t001": RunRecord(ran=[[2 * HOUR, 3 * HOUR]]),
    }
    up = [cost.Uptime(0.0, 3 * HOUR)]
    paid = {
        run_id: cost.run_cost(
            [up], cost.ran_spans(record), PRICE, cost.sharing_spans(run_id, statuses)
        ).usd
        for run_id, record in statuses.items()
    }
    assert paid == pytest.approx({"plain": 1.5 * PRICE, "sw-t000": PRICE, "sw-t001": 0.5 * PRICE})
    assert sum(paid.values()) == pytest.approx(3 * PRICE)


def test_the_trainer_shares_its_box_with_the_runs_it_sees_beside_it(tmp_path, monkeypatch):
    runs, records = tmp_path / "box-runs", tmp_path / "box"
    records.mkdir()
    for run_id in ("mine", "other"):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "status.json").write_text(json.dumps({"ran": [[MONDAY, MONDAY + HOUR]]}))
    launch = {"started_at": MONDAY, "hourly_price_usd": PRICE}
    (runs / "mine" / "launch.json").write_text(json.dumps(launch))
    (records / "boots.jsonl").write_text(json.dumps({"at": MONDAY, "boot_id": "a"}) + "\n")
    (records / "stops.jsonl").write_text(json.dumps({"at": MONDAY + HOUR, "boot_id": "a"}) + "\n")
    monkeypatch.setenv(cost.RECORDS_ENV, str(records))
    monkeypatch.setenv(cost.RUNS_ENV, str(runs))
    monkeypatch.setattr(cost, "current_boot", lambda: None)
    assert cost.box_run_cost(runs / "mine", MONDAY + HOUR).usd == pytest.approx(PRICE / 2)


# --- the bill follows the size (issue 40) ------------------------------------------------

G6, G5 = "g6.xlarge on-demand", "g5.xlarge on-demand"
PRICES = {G6: 0.8048, G5: 1.006}


def test_a_run_that_crosses_a_resize_pays_each_boot_at_its_own_size():
    # Boot 1 on g6.xlarge 09-13; no room after the nightly stop, so `fab start` resized
    # the box in place: boot 2 on g5.xlarge 20-23. The run trained 10-22.
    boots = [
        {"at": MONDAY + 9 * HOUR, "boot_id": "b1", "size": "g6.xlarge", "market": "on-demand"},
        {"at": MONDAY + 20 * HOUR, "boot_id": "b2", "size": "g5.xlarge", "market": "on-demand"},
    ]
    stops = [
        {"at": MONDAY + 13 * HOUR, "boot_id": "b1"},
        {"at": MONDAY + 23 * HOUR, "boot_id": "b2"},
    ]
    up = cost.uptimes(boots, stops)
    billed = cost.run_cost([up], [(MONDAY + 10 * HOUR, MONDAY + 22 * HOUR)], PRICES[G6], (), PRICES)
    assert billed.box_seconds == (5 * HOUR,)
    assert billed.usd == pytest.approx(3 * PRICES[G6] + 2 * PRICES[G5])
    # At the launch price alone it would be 5 h of g6.xlarge: the resize costs more.
    assert billed.usd > 5 * PRICES[G6]


def test_a_boot_with_no_size_on_record_takes_the_launch_price():
    boots = [{"at": 0.0, "boot_id": "old"}]
    up = cost.uptimes(boots, [{"at": 2 * HOUR, "boot_id": "old"}])
    assert cost.run_cost([up], [(0.0, 2 * HOUR)], PRICE, (), PRICES).usd == pytest.approx(2 * PRICE)


def test_the_trainer_prices_each_boot_from_launch_json(tmp_path, monkeypatch):
    records = tmp_path / "box"
    records.mkdir()
    (records / "boots.jsonl").write_text(
        json.dumps({"at": 0.0, "boot_id": "b1", "size": "g6.xlarge", "market": "on-demand"})
        + "\n"
        + json.dumps({"at": 4 * HOUR, "boot_id": "b2", "size": "g5.xlarge", "market": "on-demand"})
        + "\n"
    )
    (records / "stops.jsonl").write_text(
        json.dumps({"at": 2 * HOUR, "boot_id": "b1"})
        + "\n"
        + json.dumps({"at": 5 * HOUR, "boot_id": "b2"})
        + "\n"
    )
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    launch = {"started_at": 0.0, "hourly_price_usd": PRICES[G6], contract.LAUNCH_PRICES: PRICES}
    (run_dir / "launch.json").write_text(json.dumps(launch))
    monkeypatch.setenv(cost.RECORDS_ENV, str(records))
    monkeypatch.setattr(cost, "current_boot", lambda proc=None: None)
    found = cost.box_run_cost(run_dir, now=6 * HOUR)
    assert found.usd == pytest.approx(2 * PRICES[G6] + 1 * PRICES[G5])
