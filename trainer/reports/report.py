"""The human report of a run: report.md with a metrics table beside the constant
train-median baseline, and plots/learning_curve.png and plots/clarke_grid.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: boxes and CI have no display
import matplotlib.pyplot as plt
import numpy as np

from box.contract import CONFIG_FILE, PLOTS_DIR, REPORT_FILE
from trainer.metrics import clarke_zones
from trainer.reports.progress import read_metrics
from trainer.reports.settings import flag_rows

GRID_MAX_MG_DL = 400.0
# Clarke error grid zone boundaries (reference x, prediction y), mg/dL, as Clarke 1987 draws them.
CLARKE_LINES = (
    ((0, 175 / 3), (70, 70)),
    ((175 / 3, 400 / 1.2), (70, 400)),
    ((70, 70), (84, 400)),
    ((0, 70), (180, 180)),
    ((70, 290), (180, 400)),
    ((70, 70), (0, 56)),
    ((70, 400), (56, 320)),
    ((180, 180), (0, 70)),
    ((180, 400), (70, 70)),
    ((240, 240), (70, 180)),
    ((240, 400), (180, 180)),
    ((130, 180), (0, 70)),
)
CLARKE_LABELS = (
    ("A", 30, 15),
    ("B", 370, 260),
    ("B", 280, 370),
    ("C", 160, 370),
    ("C", 160, 15),
    ("D", 30, 140),
    ("D", 370, 120),
    ("E", 30, 370),
    ("E", 370, 15),
)
ZONE_COLOURS = {
    "A": "tab:green",
    "B": "tab:blue",
    "C": "tab:orange",
    "D": "tab:red",
    "E": "tab:purple",
}


# What each `meta.json` source is, in a report's words. Datasets written before
# `synth` wrote "synth" said "synthetic".
SOURCE_WORDS = {
    "vitaldb": "VitalDB, recordings of real patients",
    "synth": "synthetic waveforms: not a result on real patients",
    "synthetic": "synthetic waveforms: not a result on real patients",
}


def data_identity(dataset: Any) -> dict[str, Any]:
    """What summary.json and report.md say about the data (a `trainer.data.dataset.Dataset`):
    its source, so a synthetic result is never quoted as a real one, its size and its
    fingerprint (which checkpoints carry too)."""
    source = str(dataset.meta.get("source", "unknown"))
    return {
        "source": "synth" if source == "synthetic" else source,
        "cases": int(dataset.cases.size),
        "windows": int(dataset.windows.shape[0]),
        "fingerprint": dataset.fingerprint,
    }


def _data_line(data: dict[str, Any]) -> str:
    words = SOURCE_WORDS.get(data["source"], "source not stated in its meta.json")
    return (
        f"Data: **{data['source']}** ({words}), {data['cases']} cases, "
        f"{data['windows']:,} windows, dataset fingerprint `{data['fingerprint'][:16]}`."
    )


def plot_learning_curve(records: list[dict[str, Any]], path: Path) -> None:
    train = [r for r in records if r["kind"] == "train"]
    epochs = [r for r in records if r["kind"] == "epoch"]
    fig, (loss_ax, mae_ax) = plt.subplots(1, 2, figsize=(10, 4))
    loss_ax.plot([r["step"] for r in train], [r["loss"] for r in train], marker=".")
    loss_ax.set(
        xlabel="optimizer step",
        ylabel="train loss (smooth L1, normalised)",
        title="Training loss",
        yscale="log",
    )
    mae_ax.plot(
        [r["step"] for r in epochs], [r["val_mae"] for r in epochs], marker="o", label="model"
    )
    if epochs and "val_baseline_mae" in epochs[-1]:
        mae_ax.axhline(
            epochs[-1]["val_baseline_mae"],
            color="grey",
            linestyle="--",
            label="constant train median",
        )
    mae_ax.legend()
    mae_ax.set(xlabel="optimizer step", ylabel="MAE (mg/dL)", title="Validation MAE per epoch")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_clarke_grid(ref: np.ndarray, pred: np.ndarray, path: Path) -> None:
    zones = clarke_zones(ref, pred)
    fig, ax = plt.subplots(figsize=(7.5, 6))
    for zone, colour in ZONE_COLOURS.items():
        mask = zones == zone
        if mask.any():
            ax.scatter(
                ref[mask],
                pred[mask],
                s=4,
                c=colour,
                alpha=0.5,
                label=f"{zone}: {100 * mask.mean():.1f}%",
            )
    for xs, ys in CLARKE_LINES:
        ax.plot(xs, ys, color="black", linewidth=1)
    ax.plot([0, GRID_MAX_MG_DL], [0, GRID_MAX_MG_DL], ":", color="grey")
    for letter, x, y in CLARKE_LABELS:
        ax.text(x, y, letter, fontsize=14, weight="bold")
    ax.set(
        xlim=(0, GRID_MAX_MG_DL),
        ylim=(0, GRID_MAX_MG_DL),
        xlabel="reference (mg/dL)",
        ylabel="prediction (mg/dL)",
        title="Clarke error grid, test cases",
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title="zone")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _row(name: str, model: Any, baseline: Any, fmt: str) -> str:
    return f"| {name} | {model:{fmt}} | {baseline:{fmt}} |"


def _metrics_table(report: dict[str, Any]) -> list[str]:
    base = report["baseline"]
    lines = [f"| metric | model | constant median ({base['value']:.1f} mg/dL) |", "|---|---|---|"]
    lines.append(_row("MAE (mg/dL)", report["mae"], base["mae"], ".2f"))
    lines.append(_row("RMSE (mg/dL)", report["rmse"], base["rmse"], ".2f"))
    lines.append(_row("MARD (%)", report["mard"], base["mard"], ".2f"))
    lines.append(
        _row("ISO 15197 agreement (%)", report["iso15197_pct"], base["iso15197_pct"], ".1f")
    )
    for grid in ("clarke", "parkes"):
        a_ab = (report[grid]["A"], report[grid]["A"] + report[grid]["B"])
        b_ab = (base[grid]["A"], base[grid]["A"] + base[grid]["B"])
        lines.append(
            f"| {grid.title()} A / A+B (%) | {a_ab[0]:.1f} / {a_ab[1]:.1f} | "
            f"{b_ab[0]:.1f} / {b_ab[1]:.1f} |"
        )
    for band, value in report["mae_by_range"].items():
        other = base["mae_by_range"][band]
        shown = [f"{v:.2f}" if v is not None else "-" for v in (value, other)]
        lines.append(f"| MAE {band} (mg/dL) | {shown[0]} | {shown[1]} |")
    return lines


def cost_line(summary: dict[str, Any]) -> str:
    """What the run cost and what its interruptions took (summary.json's keys)."""
    cost = summary.get("cost")
    spent = (
        f"Cost ${summary['cost_usd']:.2f}: {sum(cost['box_hours']):.2f} box-hours up at "
        f"${cost['hourly_price_usd']:.2f}/h (the boxes' own boot and stop records)."
        if cost
        else "Cost: not counted (no box records: a run outside `fab train`)."
    )
    recoveries = summary.get("recoveries") or 0
    if not recoveries:
        return spent
    lost_h = (summary.get("time_lost_s") or 0.0) / 3600
    came_back = f"Came back {recoveries} time(s) after a stop it did not ask for"
    return f"{spent} {came_back}; {lost_h:.2f} h lost."


def _test_section(test: dict[str, Any] | None) -> list[str]:
    if test is None:
        return [
            "## Test cases: not evaluated",
            "",
            "This run is a sweep's trial (`--skip-test`): trials are compared on validation "
            "MAE only, and the sweep evaluates the test split once, for the trial it chooses.",
        ]
    return [
        f"## Test cases ({test['n']} windows, cases never seen in training)",
        "",
        *_metrics_table(test),
    ]


def _wall_time(summary: dict[str, Any]) -> str:
    """How long the run took; a resumed one's processes each, after the sum."""
    processes = summary.get("processes") or []
    total = f"{summary['wall_s']:,.0f} s"
    if len(processes) < 2:
        return total
    each = ", ".join(f"{span['wall_s']:,.0f}" for span in processes)
    return f"{total} over {len(processes)} starts ({each} s)"


def _settings_table(
    config: dict[str, Any], summary: dict[str, Any], given: frozenset[str]
) -> list[str]:
    """Every trainer flag the run trained with, as config.json resolved them, and the
    default beside each one the run changed (trainer.reports.settings)."""
    return [
        "| flag | value | default, where it differs |",
        "|---|---|---|",
        *(
            f"| `{row.flag}` | {row.value} | {row.default} |"
            for row in flag_rows(config, summary, given)
        ),
    ]


def write_report(
    run_dir: Path,
    summary: dict[str, Any],
    test_ref: np.ndarray | None,
    test_pred: np.ndarray | None,
    given: frozenset[str] = frozenset(),
) -> Path:
    """Write plots/*.png and report.md into the run dir; return report.md's path. No
    test predictions (a sweep's trial): no Clarke grid, and the report says why.
    `given`: the flags left to the trainer that the run gave all the same
    (`trainer.reports.settings.given_to_the_trainer`)."""
    run_dir = Path(run_dir)
    plots = run_dir / PLOTS_DIR
    plots.mkdir(exist_ok=True)
    plot_learning_curve(read_metrics(run_dir), plots / "learning_curve.png")
    if summary["test"] is not None:
        plot_clarke_grid(test_ref, test_pred, plots / "clarke_grid.png")
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    test, val, data = summary["test"], summary["val"], summary["data"]
    name = f" ({summary['name']})" if summary.get("name") else ""
    lines = [
        f"# Run `{summary['run_id']}`: {config['model']['arch']} on {data['cases']} "
        f"{data['source']} cases{name}",
        "",
        f"{summary['parameters']:,}-parameter model, {summary['steps']} optimizer steps over "
        f"{summary['epochs']} epochs on {summary['device']} ({summary['precision']}), "
        f"{_wall_time(summary)}. Best epoch {summary['best_epoch']} (by validation MAE).",
        "",
        _data_line(data),
        "",
        cost_line(summary),
        "",
        *_test_section(test),
        "",
        f"Validation ({val['n']} windows): MAE {val['mae']:.2f} mg/dL vs baseline "
        f"{val['baseline']['mae']:.2f}.",
        "",
        "![learning curve](plots/learning_curve.png)",
        *(["![Clarke error grid](plots/clarke_grid.png)"] if test is not None else []),
        "",
        f"## Settings ({CONFIG_FILE})",
        "",
        *_settings_table(config, summary, given),
        "",
    ]
    path = run_dir / REPORT_FILE
    path.write_text("\n".join(lines))
    return path
