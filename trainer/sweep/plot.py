"""A sweep's plots, drawn by Optuna's own matplotlib visualisations from its study.

The study is Optuna's (its journal in the sweep's folder), so its plots are too: the
optimisation history (each trial's validation MAE and the best so far), parallel
coordinates (every swept flag against validation MAE; a learning rate on a log axis,
listed values as categories, labels placed by Optuna), and each trial's validation MAE
per epoch (what the pruner saw: a pruned trial's line stops early). The driver draws
them beside report.md when the sweep ends; `fab runs --sweep` from the journal in
storage, while it runs too. Loads without torch or Optuna (`fab` imports it).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: boxes and CI have no display
import matplotlib.pyplot as plt

PLOTS = {
    "history": ("plot_optimization_history", "validation MAE per trial, and the best so far"),
    "parallel_coordinates": ("plot_parallel_coordinate", "each swept flag against it"),
    "intermediate_values": ("plot_intermediate_values", "validation MAE per epoch"),
}
"""File stem -> (the function of optuna.visualization.matplotlib, what it shows)."""
FIGURE_INCHES = (9.0, 5.0)
TARGET = "validation MAE (mg/dL)"


def plot_files(folder: Path) -> dict[str, Path]:
    return {stem: Path(folder) / f"{stem}.png" for stem in PLOTS}


def load_study(journal: Path, sweep_id: str) -> Any:
    """The sweep's study from its journal, read from a copy (the journal stays as it
    was: a sweep may still be writing it)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    # A view of a study (maybe still running): Optuna's word that a running trial has no
    # value to plot yet is no warning to its reader.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "optuna.journal"
        shutil.copyfile(journal, copy)
        storage = JournalStorage(JournalFileBackend(str(copy)))
        study = optuna.load_study(study_name=sweep_id, storage=storage)
        return _in_memory(study)


def _in_memory(study: Any) -> Any:
    """The study's trials in memory, so the journal's copy may go."""
    import optuna

    kept = optuna.create_study(direction=study.direction)
    kept.add_trials(study.get_trials(deepcopy=True))
    return kept


def plot_study(study: Any, folder: Path, title: str) -> dict[str, Path]:
    """Draw the study's plots into `folder` (PNG); the paths by stem."""
    import optuna.visualization.matplotlib as optuna_plots

    folder.mkdir(parents=True, exist_ok=True)
    paths = plot_files(folder)
    for stem, (function, shows) in PLOTS.items():
        # Optuna marks its matplotlib backend experimental, and matplotlib warns of an
        # axis with one value (one finished trial): neither is the reader's concern.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            named = {} if stem == "intermediate_values" else {"target_name": TARGET}
            drawn = getattr(optuna_plots, function)(study, **named)
        figure = _figure(drawn)
        if stem == "intermediate_values":  # Optuna's "Step" and "Intermediate Value"
            figure.axes[0].set(xlabel="epoch", ylabel=TARGET)
        figure.set_size_inches(*FIGURE_INCHES)
        figure.suptitle(f"{title}: {shows}")
        figure.tight_layout()
        figure.savefig(paths[stem], dpi=100)
        plt.close(figure)
    return paths


def _figure(drawn: Any) -> Any:
    """Optuna returns an Axes, or an array of them (one per flag)."""
    axes = drawn.flat[0] if hasattr(drawn, "flat") else drawn
    return axes.get_figure()
