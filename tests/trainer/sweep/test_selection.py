"""The chosen trial's test split, evaluated once, wherever the sweep restarts: from the
trial's run dir on this box, else from its store (a box since replaced), with a real
checkpoint, a real `file://` store and the real `evaluate` process."""

from __future__ import annotations

from pathlib import Path

from box.contract import EXIT_FINISHED, STATUS_FILE
from trainer.checkpoints import layout
from trainer.storage import open_store
from trainer.sweep import selection
from trainer.sweep.driver import distributions, open_study
from trainer.sweep.space import parse_params
from trainer.sweep.spec import RESULT_FILE, SweepSpec, read_json

PARAMS = ["lr=0.001,0.003"]


def test_a_replaced_box_evaluates_the_chosen_trial_from_storage(
    tiny_data: Path, trained_run: Path, tmp_path: Path
):
    spec = SweepSpec(
        sweep_id="sweep-s", dataset="tiny", data_dir=str(tiny_data),
        runs_dir=str(tmp_path / "runs-on-this-box"), storage_uri=f"file://{tmp_path / 'storage'}",
        params=PARAMS, method="grid", trials=1,
    )  # fmt: skip
    chosen = spec.trial_run_id(0)
    # The trial trained on the old box: its best checkpoint is in storage alone.
    best = (trained_run / "checkpoints" / "best.pt").resolve()
    store = open_store(spec.trial_checkpoint_uri(chosen))
    name = "step-000000003-epoch-0001.pt"
    layout.upload_checkpoint(store, name, best, layout.sha256_of(best))
    layout.set_pointer(store, layout.BEST_KEY, name)
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    study = open_study(spec, parse_params(PARAMS), sweep_dir)
    study.tell(study.ask(distributions(parse_params(PARAMS))), 12.5)
    assert selection.finish(spec, study, sweep_dir) == EXIT_FINISHED
    result = read_json(sweep_dir / RESULT_FILE)
    assert result["chosen"] == chosen and result["test"]["split"] == "test"
    assert result["test"]["checkpoint"] == spec.trial_checkpoint_uri(chosen)


def _spec(tmp_path: Path) -> SweepSpec:
    return SweepSpec(
        sweep_id="sweep-s", dataset="tiny", data_dir=str(tmp_path / "data"),
        runs_dir=str(tmp_path / "runs"), storage_uri=f"file://{tmp_path / 'storage'}",
        params=PARAMS, method="grid", trials=2,
    )  # fmt: skip


def test_a_trial_that_finished_with_its_last_uploads_pending_says_what_sends_them(tmp_path):
    # It counts as complete (its summary and best checkpoint are on this box, where the
    # chosen trial is evaluated); its files storage lacks wait there.
    spec = _spec(tmp_path)
    run_dir = tmp_path / "runs" / spec.trial_run_id(1)
    run_dir.mkdir(parents=True)
    (run_dir / STATUS_FILE).write_text('{"state": "finished-upload-pending"}')
    assert selection.finished_line(spec, 1, 12.5) == (
        "trial 1 finished: validation MAE 12.5 (finished-upload-pending: its last uploads did "
        f"not all reach storage; they wait in {run_dir}: `python -m trainer sync --run-dir "
        f"{run_dir} --checkpoint-uri {spec.trial_checkpoint_uri(spec.trial_run_id(1))}` sends "
        "them)"
    )


def test_a_trial_that_finished_with_its_uploads_landed_is_said_plainly(tmp_path):
    spec = _spec(tmp_path)
    run_dir = tmp_path / "runs" / spec.trial_run_id(0)
    run_dir.mkdir(parents=True)
    (run_dir / STATUS_FILE).write_text('{"state": "finished"}')
    assert selection.finished_line(spec, 0, 12.5) == "trial 0 finished: validation MAE 12.5"
