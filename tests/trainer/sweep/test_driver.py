"""The sweep's driver as the box runs it: a real `python -m trainer sweep` process whose
trials are real `train` processes, stopped by SIGTERM mid-trial (what `docker stop`, a
nightly stop or an eviction sends) and started again, as the box's resume unit does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, start_process, status_of
from trainer.sweep.spec import SweepSpec
from trainer.sweep.trials import TrialPool

SWEEP = "sweep-t"
TRIALS = (f"{SWEEP}-t000", f"{SWEEP}-t001")
STEP_WAIT_SECONDS = 240
# Long enough to be caught mid-run on a loaded CI machine, short enough to finish soon.
TRIAL_ARGS = ["--model", "resnet18", "--batch-size", "16", "--epochs", "6", "--log-every", "1",
              "--checkpoint-every-steps", "2"]  # fmt: skip


@dataclass
class Lives:
    """The driver's three starts: stopped mid-trial, resumed to the end, started again."""

    root: Path
    codes: list[int]
    status_at_stop: dict
    trials_at_stop: dict[str, dict]
    result_after_finish: dict

    @property
    def sweep_dir(self) -> Path:
        return self.root / "sweeps" / SWEEP

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id


def _driver(root: Path):
    sweep_dir = root / "sweeps" / SWEEP
    # The box's boot and stop records, as the sweep's container has them mounted.
    records = {"GLUCOSE_BOX_RECORDS": str(root / "box-records")}
    arguments = ["-m", "trainer", "sweep", "--dir", str(sweep_dir)]
    return start_process(arguments, root / "driver.log", env=records)


def _box_booted(root: Path) -> None:
    """The box's boot record: the boot it is in (this machine's) began just now."""
    (root / "box-records").mkdir()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    record = {"at": time.time(), "boot_id": boot_id}
    (root / "box-records" / "boots.jsonl").write_text(json.dumps(record) + "\n")


def _wait_for_both_trials_to_step(root: Path, process) -> None:
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while time.monotonic() < deadline:
        steps = [status_of(root / "runs" / run_id).get("step") or 0 for run_id in TRIALS]
        if min(steps) >= 2:
            return
        assert process.poll() is None, (root / "driver.log").read_text()
        time.sleep(0.2)
    raise AssertionError(f"trials never stepped:\n{(root / 'driver.log').read_text()}")


@pytest.fixture(scope="module")
def lives(tiny_data, tmp_path_factory) -> Lives:
    root = tmp_path_factory.mktemp("sweep-box")
    _box_booted(root)
    (root / "runs").mkdir()
    (root / "sweeps" / SWEEP).mkdir(parents=True)
    spec = SweepSpec(
        sweep_id=SWEEP, dataset="tiny", data_dir=str(tiny_data), runs_dir=str(root / "runs"),
        storage_uri=f"file://{root / 'storage'}", params=["lr=0.001,0.003"], method="grid",
        trials=2, concurrent=2, trainer_args=TRIAL_ARGS, hourly_price_usd=3600.0,
    )  # fmt: skip
    (root / "sweeps" / SWEEP / "sweep.json").write_text(spec.to_json())
    first = _driver(root)
    try:
        _wait_for_both_trials_to_step(root, first)
        first.send_signal(signal.SIGTERM)  # the driver alone, as docker stop does
        codes = [first.wait(EXIT_WAIT_SECONDS)]
    finally:
        first.kill()
    status_at_stop = json.loads((root / "sweeps" / SWEEP / "status.json").read_text())
    trials_at_stop = {run_id: status_of(root / "runs" / run_id) for run_id in TRIALS}
    codes.append(_driver(root).wait(EXIT_WAIT_SECONDS))
    result = json.loads((root / "sweeps" / SWEEP / "result.json").read_text())
    codes.append(_driver(root).wait(EXIT_WAIT_SECONDS))
    return Lives(root, codes, status_at_stop, trials_at_stop, result)


def test_sigterm_stops_every_trial_at_a_checkpoint_and_exits_75(lives):
    assert lives.codes[0] == 75, (lives.root / "driver.log").read_text()
    assert lives.status_at_stop["state"] == "stopped"
    for run_id, status in lives.trials_at_stop.items():
        assert status["state"] == "stopped", run_id
        assert (lives.run_dir(run_id) / "checkpoints" / "last.pt").is_file()


def test_a_restart_resumes_each_trial_from_its_checkpoint_and_ends_the_sweep(lives):
    assert lives.codes[1] == 0, (lives.root / "driver.log").read_text()
    for run_id in TRIALS:
        log = (lives.run_dir(run_id) / "train.log").read_text()
        assert "resume: step" in log, run_id
        assert status_of(lives.run_dir(run_id))["state"] == "finished", run_id
    trials = json.loads((lives.sweep_dir / "trials.json").read_text())["trials"]
    assert sorted(trial["state"] for trial in trials) == ["complete", "complete"]


def test_trials_are_compared_on_validation_only_and_never_see_the_test_split(lives):
    maes = {}
    for run_id in TRIALS:
        summary = json.loads((lives.run_dir(run_id) / "summary.json").read_text())
        assert summary["test"] is None
        maes[run_id] = summary["val"]["mae"]
    assert lives.result_after_finish["chosen"] == min(maes, key=maes.get)
    assert "mae" in lives.result_after_finish["test"]
    assert "evaluated once, after the search" in (lives.sweep_dir / "report.md").read_text()


def test_a_finished_sweep_started_again_does_not_evaluate_the_test_split_again(lives):
    assert lives.codes[2] == 0
    again = json.loads((lives.sweep_dir / "result.json").read_text())
    assert again["test_evaluated_at"] == lives.result_after_finish["test_evaluated_at"]


def test_each_trial_is_a_run_its_launch_record_names_the_sweep(lives):
    for number, run_id in enumerate(TRIALS):
        launch = json.loads((lives.run_dir(run_id) / "launch.json").read_text())
        assert (launch["sweep"], launch["trial"], launch["concurrent_trials"]) == (SWEEP, number, 2)


def test_the_sweeps_folder_is_mirrored_to_storage(lives):
    stored = lives.root / "storage" / "sweeps" / SWEEP
    for name in ("sweep.json", "optuna.journal", "status.json", "result.json", "report.md"):
        assert (stored / name).read_bytes() == (lives.sweep_dir / name).read_bytes(), name
    for plot in ("history", "parallel_coordinates", "intermediate_values"):
        assert (stored / "plots" / f"{plot}.png").is_file(), plot


def _union_seconds(spans: list[list[float]]) -> float:
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return total


def test_trials_that_run_at_once_split_the_box_and_add_up_to_what_it_billed(lives):
    # At $3600/h a dollar is a second: the box billed every second a trial ran.
    spans = [span for run_id in TRIALS for span in status_of(lives.run_dir(run_id))["ran"]]
    paid = [
        json.loads((lives.run_dir(run_id) / "summary.json").read_text())["cost_usd"]
        for run_id in TRIALS
    ]
    assert sum(paid) == pytest.approx(_union_seconds(spans), abs=5.0)


def test_a_cpu_trial_takes_at_most_the_threads_the_sweeps_container_was_given(monkeypatch):
    # OMP_NUM_THREADS from containerEnv: a box shared with other work; more threads than
    # it may use spin-wait each other (2-3x slower on two shared cores).
    spec = SweepSpec(sweep_id="s", dataset="d", data_dir="/d", runs_dir="/r",
                     storage_uri="file:///s", params=["lr=0.1"], concurrent=1)  # fmt: skip
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert TrialPool(spec).threads == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert TrialPool(spec).threads == len(os.sched_getaffinity(0))


def test_the_drivers_own_output_is_kept_in_the_sweeps_folder(tmp_path):
    # `fab logs --run SWEEP_ID` reads it once no container holds the driver; the
    # folder's mirror carries it to storage.
    spec = SweepSpec(sweep_id="s-log", dataset="d", data_dir=str(tmp_path / "no-data"),
                     runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 's'}",
                     params=["lr=0.1"])  # fmt: skip
    (tmp_path / "sweep.json").write_text(spec.to_json())
    done = subprocess.run([sys.executable, "-m", "trainer", "sweep", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = "the sweep's dataset is not there"
    assert said in done.stderr and said in (tmp_path / "train.log").read_text()
