"""The pruner judges every epoch a trial reports, however many pass between two of the
driver's looks. The driver is the real one, its looks taken by the test instead of its
5 s clock; the trial is a real `train` process. The study's finished trials lead the
median at epoch 2 alone, so a trial is behind only there: judged at its last epoch
alone, it escapes."""

import json
import os
import signal
import time

import optuna
import pytest

from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, STEP_WAIT_SECONDS
from trainer.config import SynthConfig
from trainer.data.synth import synthesize
from trainer.sweep.driver import PRUNE_STARTUP_TRIALS, Driver, distributions, open_study
from trainer.sweep.space import parse_params
from trainer.sweep.spec import SweepSpec

AHEAD_ONLY_AT_EPOCH_2 = {epoch: 1e6 for epoch in range(1, 100)} | {2: 0.0}


EPOCHS = 5


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """Three training cases of eight windows: epochs of three steps, a few seconds each on
    a loaded CI machine."""
    return synthesize(SynthConfig(tmp_path_factory.mktemp("small"), 5, 8, 32, 0))


@pytest.fixture
def driver(small_data, tmp_path, monkeypatch) -> Driver:
    """A sweep with a real prune setting whose study holds finished trials that are
    ahead of any trial at epoch 2 and behind any at every other epoch."""
    monkeypatch.setenv("GLUCOSE_IMDS_URL", "off")  # no cloud's metadata service here
    folder = tmp_path / "sweeps" / "judged"
    folder.mkdir(parents=True)
    spec = SweepSpec(
        sweep_id="judged", dataset="small", data_dir=str(small_data),
        runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 'storage'}",
        params=["lr=0.001"], method="random", trials=PRUNE_STARTUP_TRIALS + 1, prune=True,
        # Two slots for the one trial left: one OpenMP thread, none spinning on CI's cores.
        concurrent=2, trainer_args=["--model", "resnet18", "--batch-size", "8",
                                    "--epochs", str(EPOCHS), "--warmup-fraction", "0"],
    )  # fmt: skip
    (folder / "sweep.json").write_text(spec.to_json())
    params = parse_params(spec.params)
    study = open_study(spec, params, folder)
    for _ in range(PRUNE_STARTUP_TRIALS):
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": 0.001},
                distributions=distributions(params),
                value=1e6,
                intermediate_values=AHEAD_ONLY_AT_EPOCH_2,
            )
        )
    return Driver(spec, folder)


def _epochs_written(run_dir) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    return sum(json.loads(line).get("kind") == "epoch" for line in lines if line.endswith("}"))


def _the_trial(driver: Driver):
    driver.look()  # starts it
    (trial,) = driver.pool.running.values()
    return trial


def _state_after_it_ends(driver: Driver, trial) -> optuna.trial.FrozenTrial:
    trial.process.wait(EXIT_WAIT_SECONDS)
    driver.look()
    assert not driver.pool.running
    return driver.study.get_trials()[-1]


def test_a_running_trial_behind_at_an_epoch_between_two_looks_is_pruned(driver):
    trial = _the_trial(driver)
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while _epochs_written(trial.run_dir) < 3:  # epochs 1-3 land before the next look
        assert trial.process.poll() is None, (trial.run_dir / "train.log").read_text()
        assert time.monotonic() < deadline, "the trial never finished three epochs"
        time.sleep(0.05)
    os.kill(trial.process.pid, signal.SIGSTOP)  # held there until the driver has looked
    try:
        driver.look()
    finally:
        os.kill(trial.process.pid, signal.SIGCONT)
    judged = _state_after_it_ends(driver, trial)
    assert judged.state == optuna.trial.TrialState.PRUNED
    assert sorted(judged.intermediate_values) == [1, 2]
    status = json.loads((trial.run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["epoch"] < EPOCHS


def test_a_trial_that_ended_between_two_looks_is_judged_at_each_of_its_epochs(driver):
    trial = _the_trial(driver)
    judged = _state_after_it_ends(driver, trial)  # every epoch before the driver looked
    assert judged.state == optuna.trial.TrialState.PRUNED
    assert sorted(judged.intermediate_values) == [1, 2]
