"""`--prune`: a trial behind the finished trials' median at an epoch is stopped at a
checkpoint and recorded as pruned; it is never the chosen one; every epoch of the
finished trials is in the study. Real trainer processes: a learning rate of 1e-7 leaves
the network where it started, far behind the others (validation MAE after two epochs,
measured here: ~30 against ~13 and ~13)."""

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
    return synthesize(SynthConfig(tmp_path_factory.mktemp("learnable"), 8, 144, 64, 0))


def test_a_trial_far_behind_the_median_is_pruned_at_a_checkpoint(learnable_data, tmp_path):
    folder = tmp_path / "sweeps" / "pruned"
    folder.mkdir(parents=True)
    spec = SweepSpec(
        sweep_id="pruned", dataset="synth", data_dir=str(learnable_data),
        runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 'storage'}",
        # In the grid's order: lr 0.003 with seeds 0 and 1 finish, then lr 1e-7 starts.
        # No warm-up (the finished trials lead from epoch 2): judged at epoch 2, the
        # pruned trial is stopped at the driver's next look (5 s at most, epochs of ~1-3 s
        # here): 6 epochs leave it in its loop then.
        params=["lr=0.003,0.0000001", "seed=0,1"], method="grid", trials=3, concurrent=1,
        prune=True, trainer_args=["--model", "resnet18", "--batch-size", "32", "--epochs", "6",
                                  "--warmup-fraction", "0"],
    )  # fmt: skip
    (folder / "sweep.json").write_text(spec.to_json())
    driver = start_process(["-m", "trainer", "sweep", "--dir", str(folder)], tmp_path / "log")
    try:
        assert driver.wait(EXIT_WAIT_SECONDS) == 0, (tmp_path / "log").read_text()
    finally:
        driver.terminate()  # past the wait, the sweep stops its trials at a checkpoint
    trials = json.loads((folder / "trials.json").read_text())["trials"]
    assert [trial["state"] for trial in trials] == ["complete", "complete", "pruned"]
    status = json.loads((tmp_path / "runs" / "pruned-t002" / "status.json").read_text())
    assert status["state"] == "stopped" and status["epoch"] < 6
    assert json.loads((folder / "result.json").read_text())["chosen"] != "pruned-t002"
    # The finished trials' last epochs ended between two looks of the driver: the pruner
    # compared the third trial against them, so the study holds every one.
    finished = open_study(spec, parse_params(spec.params), folder).get_trials()[:2]
    assert [sorted(trial.intermediate_values) for trial in finished] == [
        list(range(1, _epochs_in_log(tmp_path / "runs" / f"pruned-t00{n}") + 1)) for n in (0, 1)
    ]


def _epochs_in_log(run_dir) -> int:
    return sum(line.startswith("epoch ") and ": val MAE" in line
               for line in (run_dir / "train.log").read_text().splitlines())  # fmt: skip
