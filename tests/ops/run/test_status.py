"""`fab status`: state, progress and cost from what the box holds."""

import json
import time
from pathlib import Path

from box import contract
from box.contract import RunRecord
from ops.run.on_box import ContainerState
from ops.run.status import describe_state
from tests.ops.conftest import assert_one_line_error
from trainer.reports import cost


def _container(exit_code, running=False, restarting=False):
    return ContainerState("r", running, restarting, exit_code, "", "", 0)


def test_states_follow_the_trainer_exit_codes():
    nothing = RunRecord()
    assert describe_state(_container(0, running=True), nothing, False) == "running"
    assert describe_state(_container(0), nothing, False) == "finished"
    pending = RunRecord(state="finished-upload-pending")
    assert describe_state(_container(0), pending, False) == "finished-upload-pending"
    assert describe_state(_container(75), nothing, False).startswith("preempted-waiting")
    assert describe_state(_container(75), nothing, True).startswith("stopped by `fab stop`")
    assert describe_state(_container(69), nothing, False).startswith("waiting for its other boxes")
    assert describe_state(_container(2), nothing, False).startswith("failed (exit 2")
    assert describe_state(_container(137), nothing, False).startswith("failed (exit 137")
    assert describe_state(None, RunRecord(state="finished"), False) == "finished"


def _write_run(box, run_id, status, started_ago_s):
    run_dir = box.root / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps(status))
    (run_dir / "metrics.jsonl").write_text('{"step": 40, "train_loss": 0.25}\n')
    launch = {"run_id": run_id, "image": "img", "started_at": time.time() - started_ago_s}
    (run_dir / "launch.json").write_text(json.dumps(launch))


def _box_up_since(box, seconds_ago):
    """The box's record of the boot it is in (this machine's: the box is the tests' sshd
    here), so its money comes from the test's clock, not from when this machine booted."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    record = {"at": time.time() - seconds_ago, "boot_id": boot_id}
    (box.root / contract.WATCHDOG_DIR / contract.BOOTS_FILE).write_text(json.dumps(record) + "\n")


def test_status_shows_progress_speed_and_money(local_box):
    status = {
        "run_id": "r1",
        "state": "running",
        "epoch": 2,
        "step": 40,
        "total_steps": 100,
        "train_loss": 0.25,
        "val_mae": 18.5,
        "windows_per_s": 12345.0,
        "eta_s": 3600,
        "updated_at": time.time() - 5,
    }
    _write_run(local_box, "r1", status, started_ago_s=3600)
    _box_up_since(local_box, 2 * 3600)
    result = local_box.fab("status", "--run", "r1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "state:      running" in out
    assert "epoch 2, step 40 / 100" in out
    assert "val MAE: 18.50 mg/dL" in out
    assert "12,345 windows/s" in out
    assert "gpu:        none" in out
    assert "$1.50 so far" in out  # one hour at the target's 1.5 $/h
    assert "projected:  $3.00 for the whole run (ETA 1 h 00 min)" in out  # plus the ETA
    assert "at $1.50/h on-demand a box" in out
    assert "last log:   step 40, train_loss 0.25" in out


def test_stop_of_a_run_the_box_does_not_hold_says_so(local_box):
    result = local_box.fab("stop", "--run", "never-started")
    assert result.returncode == 1
    assert_one_line_error(result, "no run never-started on", "nothing to stop")


def test_status_shows_the_watchdog_countdown_of_an_idle_box(local_box):
    _write_run(local_box, "r2", {"state": "finished", "step": 9}, started_ago_s=60)
    state = {"decision": "idle", "busy_reasons": [], "stop_at": time.time() + 600}
    (local_box.root / "watchdog" / "state.json").write_text(json.dumps(state))
    result = local_box.fab("status", "--run", "r2")
    assert result.returncode == 0, result.stderr
    assert "stops itself (and its bill) in 10 min" in result.stdout


def test_status_counts_the_runs_recoveries_and_the_time_they_cost(local_box):
    status = {"state": "running", "step": 9, "recoveries": 2, "time_lost_s": 2700.0}
    _write_run(local_box, "r3", status, started_ago_s=60)
    result = local_box.fab("status", "--run", "r3")
    assert result.returncode == 0, result.stderr
    assert "recovered:  2 time(s) after a stop it did not ask for" in result.stdout
    assert "45 min lost" in result.stdout


def _cost_of(box, run_id: str) -> str:
    result = box.fab("status", "--run", run_id)
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("cost:"))


def _ran(*hours_ago: tuple[float, float]) -> list[list[float]]:
    now = time.time()
    return [[now - start * 3600, now - end * 3600] for start, end in hours_ago]


def test_a_run_that_is_not_running_pays_nothing_past_its_last_word(local_box):
    # Preempted 4 h ago and never back; killed (exit 137) 2 h ago with its status still
    # `running`. One after the other: each had the box to itself while it ran.
    _box_up_since(local_box, 6 * 3600)
    for run_id, state, hours in (("evicted", "preempted", (5, 4)), ("killed", "running", (3, 2))):
        ran = _ran(hours)
        status = {"state": state, "step": 9, "updated_at": ran[-1][1], "ran": ran}
        _write_run(local_box, run_id, status, started_ago_s=hours[0] * 3600)
        assert "$1.50 " in _cost_of(local_box, run_id), run_id
        assert "up box 0 1 h 00 min while its trainer ran" in _cost_of(local_box, run_id), run_id


def test_a_run_stopped_and_resumed_pays_only_the_spans_it_ran(local_box):
    # Another run had the box for the 3 h between (its hours are its own).
    _box_up_since(local_box, 6 * 3600)
    ran = _ran((5, 4), (1, 0.5))
    status = {"state": "stopped", "step": 9, "updated_at": ran[-1][1], "ran": ran}
    _write_run(local_box, "resumed", status, started_ago_s=5 * 3600)
    assert "$2.25 in all (the run is not running): up box 0 1 h 30 min" in _cost_of(
        local_box, "resumed"
    )


def test_a_status_json_nested_too_deep_reads_as_no_status(local_box):
    nested = "[" * 1000 + "]" * 1000
    _write_run(local_box, "deep", {}, started_ago_s=60)
    for name in ("status.json", "launch.json"):
        (local_box.root / "runs" / "deep" / name).write_text(nested)
    result = local_box.fab("status", "--run", "deep")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "state:      not started" in result.stdout


def _write_trial(box, sweep_id: str, number: int, ran: list[list[float]]) -> str:
    run_id = f"{sweep_id}-t{number:03d}"
    status = {"state": "finished", "step": 9, "updated_at": ran[-1][1], "ran": ran}
    _write_run(box, run_id, status, started_ago_s=time.time() - ran[0][0])
    launch = {"run_id": run_id, "image": "img", "started_at": ran[0][0],
              "hourly_price_usd": 1.5, "sweep": sweep_id, "trial": number}  # fmt: skip
    (box.root / "runs" / run_id / "launch.json").write_text(json.dumps(launch))
    return run_id


def _dollars(line: str) -> float:
    return float(line.split()[1].lstrip("$"))


def test_a_sweeps_trials_share_the_box_and_add_up_to_what_it_billed(local_box):
    # Two trials at a time, for the 2 h the box had trials: $3.00 billed at $1.50/h.
    _box_up_since(local_box, 4 * 3600)
    trials = [
        _write_trial(local_box, "sw", n, _ran(hours))
        for n, hours in enumerate([(3, 1), (3, 2), (2, 1)])
    ]
    paid = {run_id: _dollars(_cost_of(local_box, run_id)) for run_id in trials}
    assert paid == {"sw-t000": 1.50, "sw-t001": 0.75, "sw-t002": 0.75}
    assert sum(paid.values()) == 2 * 1.5


def test_a_run_beside_a_sweep_shares_the_box_and_all_add_up_to_what_it_billed(local_box):
    # A plain run 3-1 h ago beside a sweep's trials (3-2 h, 2-0 h ago): $4.50 billed.
    _box_up_since(local_box, 4 * 3600)
    ran = _ran((3, 1))
    status = {"state": "finished", "step": 9, "updated_at": ran[-1][1], "ran": ran}
    _write_run(local_box, "plain", status, started_ago_s=3 * 3600)
    trials = [
        _write_trial(local_box, "sw", n, _ran(hours)) for n, hours in enumerate([(3, 2), (2, 0)])
    ]
    paid = {run_id: _dollars(_cost_of(local_box, run_id)) for run_id in ["plain", *trials]}
    assert paid == {"plain": 1.50, "sw-t000": 0.75, "sw-t001": 2.25}
    assert sum(paid.values()) == 3 * 1.5


def test_a_trials_dollars_in_fab_status_are_those_fab_runs_shows(local_box, monkeypatch):
    # `fab runs --sweep` shows each trial's summary, whose cost the trainer counted at
    # its end from the box's records (trainer.loop.train: `cost.box_run_cost`).
    _box_up_since(local_box, 4 * 3600)
    runs = local_box.root / "runs"
    monkeypatch.setenv(cost.RECORDS_ENV, str(local_box.root / contract.WATCHDOG_DIR))
    ended = {}
    for n, hours in enumerate([(3, 1.5), (2.5, 1), (2, 0.5)]):
        ended[_write_trial(local_box, "sw", n, _ran(hours))] = time.time() - hours[1] * 3600
    for run_id, at in ended.items():
        counted = cost.box_run_cost(runs / run_id, at)
        summary = {"val": {"mae": 10.0}, "epochs": 3, "cost_usd": round(counted.usd, 2)}
        (runs / run_id / "summary.json").write_text(json.dumps(summary))
    listed = local_box.fab("runs", "--sweep", "sw", "--json", "--local", str(runs))
    assert listed.returncode == 0, listed.stderr
    shown = {row["run_id"]: row["cost_usd"] for row in json.loads(listed.stdout)["runs"]}
    assert shown == {run_id: _dollars(_cost_of(local_box, run_id)) for run_id in shown}
    assert len(shown) == 3


def test_a_run_the_box_does_not_hold_is_shown_as_storage_records_it(local_box):
    from trainer.storage import open_store

    local_box.write_target()
    storage = open_store(f"file://{local_box.root.parent / 'storage'}")
    storage.write_bytes("runs/cpu-demo/status.json", b'{"state": "finished", "step": 40}')
    storage.write_bytes("runs/cpu-demo/summary.json", b'{"val": {"mae": 16.2}}')
    result = local_box.fab("status", "--run", "cpu-demo")
    assert result.returncode == 0, result.stderr
    assert "not started" not in result.stdout
    assert "finished (not on " in result.stdout and "runs/cpu-demo/" in result.stdout


def test_a_run_killed_in_its_last_uploads_is_finished_with_uploads_pending_never_failed():
    # The box starts its container again to send them (box/unfinished_uploads.py).
    pending = RunRecord(state="finished-upload-pending", uploads={"pending": 1})
    assert describe_state(_container(137), pending, False) == "finished-upload-pending"
    said_finished = RunRecord(state="finished", uploads={"pending": 0})
    assert describe_state(_container(137), said_finished, False) == "finished-upload-pending"
    no_store = RunRecord(state="finished")  # `uploads` null: nothing to land
    assert describe_state(_container(137), no_store, False).startswith("failed (exit 137")


def _pending_run(box, run_id: str, on_box: dict[str, bytes], stored: list[str]) -> Path:
    """A run that finished with storage down: every file on the box, `stored` of them in
    the target's `file://` storage."""
    from trainer.storage import open_store

    run_dir = box.root / "runs" / run_id
    status = {"run_id": run_id, "state": "finished-upload-pending", "uploads": {"pending": 1}}
    files = {**on_box, "status.json": json.dumps(status).encode()}
    store = open_store(f"file://{box.root.parent / 'storage'}/runs/{run_id}")
    for name, body in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(body)
        if name in stored:
            store.write_bytes(name, body)
    return run_dir


def test_status_names_the_files_a_finished_run_has_not_got_into_storage(local_box):
    final = "checkpoints/step-000000009-epoch-0002.pt"
    files = {"summary.json": b"{}", "report.md": b"# r\n", final: b"w", "train.log": b"x\n"}
    run_dir = _pending_run(local_box, "r-up", files, stored=["summary.json", "train.log"])
    result = local_box.fab("status", "--run", "r-up")
    assert result.returncode == 0, result.stderr
    state = next(line for line in result.stdout.splitlines() if line.startswith("state:"))
    assert f"finished, but 2 of its files have not reached storage ({final}, report.md)" in state
    assert f"they wait on {local_box.server.user}@{local_box.server.host}:{run_dir}" in state
    assert "`docker start glucose-train-r-up` on the box starts it now" in state


def test_status_of_a_finished_run_whose_files_all_landed_says_only_its_record_lags(local_box):
    _pending_run(local_box, "r-all", {"summary.json": b"{}"}, stored=["summary.json"])
    result = local_box.fab("status", "--run", "r-all")
    assert result.returncode == 0, result.stderr
    assert "state:      finished, its files all in storage, but its record does not say so" in (
        result.stdout
    )


def test_a_file_name_on_the_box_reaches_status_as_letters(local_box):
    _pending_run(local_box, "r-esc", {"plots/\x1b]0;owned\x07.png": b"png"}, stored=[])
    result = local_box.fab("status", "--run", "r-esc")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\\x1b]0;owned\\x07.png" in result.stdout
