"""Validation MAE against each swept value: one panel per flag, one point per trial.

Numbers go on a numeric axis (logarithmic when they span more than a decade, as a
learning rate does); names and the few listed values of a grid go on a categorical
one. The best trial is ringed. matplotlib only: `fab runs --sweep` draws it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: boxes and CI have no display
import matplotlib.pyplot as plt

LOG_SPAN = 10.0
PANEL_INCHES = 4.0


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _position(place: dict[str, int]):
    """Where a value goes on its axis: its own number, or its place among the names."""
    return (lambda x: place[str(x)]) if place else (lambda x: x)


def plot_val_mae(points: list[tuple[dict[str, Any], float]], path: Path, title: str) -> Path:
    """Draw `points` ((values of one trial, its validation MAE)) into `path` (PNG)."""
    names = sorted({name for values, _ in points for name in values}) or ["(no trial yet)"]
    fig, axes = plt.subplots(
        1, len(names), figsize=(PANEL_INCHES * len(names), PANEL_INCHES), squeeze=False
    )
    best = min(points, key=lambda point: point[1]) if points else None
    for ax, name in zip(axes[0], names, strict=True):
        shown = [(values[name], mae) for values, mae in points if name in values]
        xs = [x for x, _ in shown]
        place = {}  # a name's position on a categorical axis
        if not _numeric(xs):
            place = {label: i for i, label in enumerate(sorted({str(x) for x in xs}))}
            ax.set_xticks(list(place.values()), list(place))
        elif xs and min(xs) > 0 and max(xs) / min(xs) > LOG_SPAN:
            ax.set_xscale("log")
        at = _position(place)
        ax.scatter([at(x) for x in xs], [mae for _, mae in shown], color="tab:blue")
        if best is not None and name in best[0]:
            ax.scatter(
                [at(best[0][name])], [best[1]], s=160, facecolors="none", edgecolors="tab:red",
                label="chosen (lowest validation MAE)",
            )  # fmt: skip
            ax.legend(fontsize=8)
        ax.set(xlabel=name, ylabel="validation MAE (mg/dL)")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
