"""A sweep's plots are Optuna's own, drawn from its study (a real one in a journal, as
the driver keeps it): history, parallel coordinates, validation MAE per epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.run_folders import write_journal
from trainer.sweep.plot import PLOTS, load_study, plot_study

SWEEP = "s-plot"


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """Four trials over lr: three finished, one pruned at epoch 2."""
    trials = [(1e-4, [30.0, 25.0, 20.0], False), (1e-3, [29.0, 24.0, 19.0], False),
              (1e-2, [28.0, 23.0, 18.0], False), (5e-2, [27.0, 22.0], True)]  # fmt: skip
    return write_journal(tmp_path / "optuna.journal", SWEEP, trials)


def test_the_study_is_read_from_its_journal_with_every_trial_and_epoch(journal):
    study = load_study(journal, SWEEP)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED"]
    assert study.trials[3].intermediate_values == {1: 27.0, 2: 22.0}


def test_history_parallel_coordinates_and_epochs_are_drawn_as_pngs(journal, tmp_path):
    paths = plot_study(load_study(journal, SWEEP), tmp_path / "plots", f"sweep {SWEEP}")
    assert set(paths) == set(PLOTS) == {"history", "parallel_coordinates", "intermediate_values"}
    for path in paths.values():
        assert path.read_bytes().startswith(b"\x89PNG"), path


def test_a_journal_read_for_plots_is_left_as_it_was(journal, tmp_path):
    before = journal.read_bytes()
    plot_study(load_study(journal, SWEEP), tmp_path / "plots", "sweep")
    assert journal.read_bytes() == before
