"""`--prune`: a trial behind the finished trials' median at an epoch is stopped at a
checkpoint and recorded as pruned; it is never the chosen one. Real trainer processes:
a learning rate of 1e-7 leaves the network where it started, far behind the others
(validation MAE after one epoch, measured here: ~31 against ~26 and ~23)."""

import json

import pytest

from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, start_process
from trainer.config import SynthConfig
from trainer.data.synth import synthesize
from trainer.sweep.driver import open_study
from trainer.sweep.space import parse_params
from trainer.sweep.spec import SweepSpec


@pytest.fixture(scope="module")
def learnable_data(tmp_path_factory):
    """Enough cases that one epoch at a sane learning rate beats an untrained network
    (the shared tiny set's single validation case does not tell them apart)."""
    return synthesize(SynthConfig(tmp_path_factory.mktemp("learnable"), 8, 48, 64, 0))


def test_a_trial_far_behind_the_median_is_pruned_at_a_checkpoint(learnable_data, tmp_path):
    folder = tmp_path / "sweeps" / "pruned"
    folder.mkdir(parents=True)
    spec = SweepSpec(
        sweep_id="pruned", dataset="synth", data_dir=str(learnable_data),
        runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 'storage'}",
        # In the grid's order: lr 0.003 with seeds 0 and 1 finish, then lr 1e-7 starts.
        # Epochs of ~2 s here against the driver's look every 5 s: 8 leave the pruned
        # trial inside its loop when the stop comes.
        params=["lr=0.003,0.0000001", "seed=0,1"], method="grid", trials=3, concurrent=1,
        prune=True, trainer_args=["--model", "resnet18", "--batch-size", "32", "--epochs", "8"],
    )  # fmt: skip
    (folder / "sweep.json").write_text(spec.to_json())
    driver = start_process(["-m", "trainer", "sweep", "--dir", str(folder)], tmp_path / "log")
    assert driver.wait(EXIT_WAIT_SECONDS) == 0, (tmp_path / "log").read_text()
    trials = json.loads((folder / "trials.json").read_text())["trials"]
    assert [trial["state"] for trial in trials] == ["complete", "complete", "pruned"]
    status = json.loads((tmp_path / "runs" / "pruned-t002" / "status.json").read_text())
    assert status["state"] == "stopped" and status["epoch"] < 8
    assert json.loads((folder / "result.json").read_text())["chosen"] != "pruned-t002"


def _epochs_in_log(run_dir) -> int:
    return sum(line.startswith("epoch ") and ": val MAE" in line
               for line in (run_dir / "train.log").read_text().splitlines())  # fmt: skip


def test_every_epoch_of_a_finished_trial_is_in_the_study(learnable_data, tmp_path):
    """Its last epochs end between two looks of the driver: the pruner needs them all to
    compare later trials at those epochs."""
    folder = tmp_path / "sweeps" / "told"
    folder.mkdir(parents=True)
    spec = SweepSpec(
        sweep_id="told", dataset="synth", data_dir=str(learnable_data),
        runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 'storage'}",
        params=["seed=0,1"], method="grid", trials=2, concurrent=1, prune=True,
        trainer_args=["--model", "resnet18", "--batch-size", "32", "--epochs", "3"],
    )  # fmt: skip
    (folder / "sweep.json").write_text(spec.to_json())
    driver = start_process(["-m", "trainer", "sweep", "--dir", str(folder)], tmp_path / "log")
    assert driver.wait(EXIT_WAIT_SECONDS) == 0, (tmp_path / "log").read_text()
    study = open_study(spec, parse_params(spec.params), folder)
    for trial in study.get_trials():
        run_dir = tmp_path / "runs" / spec.trial_run_id(trial.number)
        assert sorted(trial.intermediate_values) == list(range(1, _epochs_in_log(run_dir) + 1))
