"""The sweep's journal outlives a full disk and a replaced box: real Optuna journals on a
real tmpfs that fills up, and the mirror's copy in a directory store."""

from __future__ import annotations

import dataclasses
import errno
import json
from pathlib import Path

import pytest

from trainer.config import UserError
from trainer.sweep import journal
from trainer.sweep.driver import distributions, open_study
from trainer.sweep.mirror import Mirror
from trainer.sweep.space import parse_params
from trainer.sweep.spec import JOURNAL_FILE, SweepSpec

PARAMS = ["lr=0.001,0.003"]


def _spec(tmp_path: Path) -> SweepSpec:
    return SweepSpec(
        sweep_id="sweep-j", dataset="tiny", data_dir="/d", runs_dir=str(tmp_path / "runs"),
        storage_uri=f"file://{tmp_path / 'storage'}", params=PARAMS, method="grid", trials=2,
    )  # fmt: skip


def _open(spec: SweepSpec, sweep_dir: Path):
    return open_study(spec, parse_params(PARAMS), sweep_dir)


def _fill(directory: Path) -> Path:
    """Write until the file system is full; the filler file, to free it again."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def test_an_append_cut_by_a_full_disk_never_stops_the_sweep_from_starting(tmpfs, tmp_path):
    sweep_dir = tmpfs("256k")
    spec = _spec(tmp_path)
    study = _open(spec, sweep_dir)
    filler = _fill(sweep_dir)
    with pytest.raises(OSError):  # half the line lands, the rest finds no room
        study.set_user_attr("notes", "x" * 8000)
    filler.unlink()  # the disk has room again
    again = _open(spec, sweep_dir)  # the next start, and what it appends
    again.set_user_attr("after", 1)
    again.set_user_attr("more", 2)
    later = _open(spec, sweep_dir)  # and the start after that
    assert (later.user_attrs["after"], later.user_attrs["more"]) == (1, 2)
    assert len(later.get_trials()) == 2  # the grid's queue, intact
    assert (sweep_dir / f"{JOURNAL_FILE}.torn").is_file()


def test_a_journal_that_lost_lines_comes_back_from_its_verified_copy(tmp_path):
    sweep_dir, spec = tmp_path / "sweep", _spec(tmp_path)
    sweep_dir.mkdir()
    study = _open(spec, sweep_dir)
    trial = study.ask(distributions(parse_params(PARAMS)))
    study.tell(trial, 5.0)
    journal.keep_verified(sweep_dir)  # the driver's look
    path = sweep_dir / JOURNAL_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # cut mid-file
    assert [t.value for t in _open(spec, sweep_dir).get_trials()] == [5.0, None]


def test_a_replaced_box_resumes_the_sweep_from_the_stored_journal(tmp_path):
    spec = _spec(tmp_path)
    first_box, replaced = tmp_path / "box-1" / "sweep", tmp_path / "box-2" / "sweep"
    first_box.mkdir(parents=True)
    replaced.mkdir(parents=True)
    study = _open(spec, first_box)
    trial = study.ask(distributions(parse_params(PARAMS)))
    study.tell(trial, 5.0)
    Mirror(spec, first_box).sync()
    resumed = _open(spec, replaced)
    trials = resumed.get_trials()
    assert len(trials) == 2  # the stored grid, not a second one enqueued over it
    assert (trials[0].params, trials[0].value) == ({"lr": 0.001}, 5.0)


def test_a_trial_never_resumes_checkpoints_an_earlier_trial_made_under_other_values(tmp_path):
    # The journal is gone (storage had none either): the study starts anew, and its
    # t000/t001 ids hold what the old t000/t001 stored, trained with the other lr.
    import optuna

    from trainer.storage import open_store
    from trainer.sweep.driver import Driver

    spec = _spec(tmp_path)
    for number, lr in enumerate((0.003, 0.001)):
        stored = open_store(f"{spec.storage_uri}/runs/{spec.trial_run_id(number)}")
        stored.write_bytes("config.json", json.dumps({"optim": {"lr": lr}}).encode())
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    driver = Driver(spec, sweep_dir)
    driver._fill()
    assert driver.pool.running == {}  # no trainer started on the other values' checkpoints
    states = [trial.state for trial in driver.study.get_trials()]
    assert states == [optuna.trial.TrialState.FAIL] * 2


def test_a_new_sweep_given_an_old_sweeps_id_is_refused_naming_the_old_one(tmp_path):
    old = _spec(tmp_path)
    first_box = tmp_path / "box-1" / "sweep"
    first_box.mkdir(parents=True)
    (first_box / "sweep.json").write_text(old.to_json())
    _open(old, first_box)
    Mirror(old, first_box).sync()
    new = dataclasses.replace(old, params=["dropout=0.1,0.3"])
    another_box = tmp_path / "box-2" / "sweep"
    another_box.mkdir(parents=True)
    with pytest.raises(UserError) as refused:
        open_study(new, parse_params(new.params), another_box)
    message = str(refused.value)
    assert "sweep id sweep-j is taken" in message and "lr=0.001,0.003" in message
    assert "\n" not in message
    assert not (another_box / JOURNAL_FILE).exists()


def test_a_trial_whose_values_were_cut_from_the_journal_fails_naming_itself(tmp_path):
    import optuna

    from trainer.sweep.driver import Driver

    spec = _spec(tmp_path)
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    study = _open(spec, sweep_dir)
    study.ask(distributions(parse_params(PARAMS)))  # its values: the journal's last line
    path = sweep_dir / JOURNAL_FILE
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    assert b'"param_name":"lr"' in data[last:]
    path.write_bytes(data[: last + (len(data) - last) // 2])  # the append cut inside it
    driver = Driver(spec, sweep_dir)
    driver._resume_running()
    try:
        assert driver.pool.running == {}, "trial 0 started on the trainer's defaults"
    finally:
        for trial in driver.pool.running.values():
            trial.process.kill()
    assert driver.study.get_trials()[0].state == optuna.trial.TrialState.FAIL
