"""Choosing a sweep's trial honestly, and saying how.

Trials are compared on validation MAE alone (each ran with `--skip-test`). Once the
search is over, the trial with the lowest validation MAE is chosen and its best
checkpoint evaluated on the test split, once: `python -m trainer evaluate`, its result
kept in result.json, which a resumed or restarted sweep reuses instead of evaluating
again. report.md says all of this beside the ranked trials and Optuna's plots of the study.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from box.contract import (
    BEST_CHECKPOINT,
    CHECKPOINTS_DIR,
    EXIT_FAILED,
    EXIT_FINISHED,
    RUN_LOG_FILE,
    STATE_UPLOAD_PENDING,
    TRIAL_PRUNED,
    TRIAL_RUNNING,
    RunRecord,
    RunSummary,
)
from trainer.atomic_write import write_json_atomic
from trainer.sweep.plot import PLOTS, plot_study
from trainer.sweep.spec import PLOTS_DIR, REPORT_FILE, RESULT_FILE, SweepSpec, read_json

EVALUATE_TIMEOUT_SECONDS = 3600


def val_mae(run_dir: Path) -> float | None:
    """The validation MAE of a finished trial's best weights (its summary.json)."""
    return RunSummary.read(Path(run_dir)).val_mae


def finished_line(spec: SweepSpec, number: int, mae: float | None) -> str:
    """What the driver says of trial `number`, which exited 0 with `mae`. One whose
    status says STATE_UPLOAD_PENDING (storage down at its end) counts as complete all
    the same: it trained to its end, and its summary and best checkpoint are in its run
    dir on this box, where the chosen trial is evaluated. Its files storage lacks wait
    there: said, with the command that sends them (a trial has no container of its own
    for the box's resume unit to start again)."""
    said = f"trial {number} finished: validation MAE {mae}"
    run_id = spec.trial_run_id(number)
    run_dir = Path(spec.runs_dir) / run_id
    if RunRecord.read(run_dir).state != STATE_UPLOAD_PENDING:
        return said
    return (
        f"{said} ({STATE_UPLOAD_PENDING}: its last uploads did not all reach storage; they "
        f"wait in {run_dir}: `python -m trainer sync --run-dir {run_dir} --checkpoint-uri "
        f"{spec.trial_checkpoint_uri(run_id)}` sends them)"
    )


def trial_rows(spec: SweepSpec, study: Any, pruned: set[int]) -> list[dict[str, Any]]:
    """Every trial asked so far: number, run id, state, values, validation MAE."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        state = trial.state.name.lower()
        if trial.number in pruned and state == TRIAL_RUNNING:
            state = TRIAL_PRUNED  # stopped by the sweep: Optuna's record still says running
        rows.append(
            {
                "number": trial.number,
                "run_id": spec.trial_run_id(trial.number),
                "state": state,
                "values": trial.params,
                "val_mae": trial.value,
            }
        )
    return rows


def _evaluate_test(spec: SweepSpec, run_id: str) -> dict[str, Any]:
    """The test split's metrics of `run_id`'s best checkpoint: its one use. From the run
    dir on this box, else (the trial ran on a box since replaced) from its store."""
    env = dict(os.environ)
    if spec.gpus > 0:
        env["CUDA_VISIBLE_DEVICES"] = "0"
    checkpoint = f"{spec.runs_dir}/{run_id}/{CHECKPOINTS_DIR}/{BEST_CHECKPOINT}"
    if not Path(checkpoint).is_file():  # trained on a box since replaced: storage's BEST
        checkpoint = spec.trial_checkpoint_uri(run_id)
    command = [sys.executable, "-m", "trainer", "evaluate", "--data", spec.data_dir,
               "--checkpoint", checkpoint, "--split", "test"]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=EVALUATE_TIMEOUT_SECONDS
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"evaluate {checkpoint} exited {done.returncode}: {tail}")
    return json.loads(done.stdout)


def finish(spec: SweepSpec, study: Any, sweep_dir: Path) -> int:
    """Choose, evaluate the test split once, write result.json, report.md and the plots."""
    import optuna

    rows = trial_rows(spec, study, set())
    complete = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    plot_study(study, sweep_dir / PLOTS_DIR, f"sweep {spec.sweep_id}")
    if not complete:
        _write_report(spec, sweep_dir, rows, None)
        said = f"sweep {spec.sweep_id}: no trial finished; see each trial's {RUN_LOG_FILE}"
        print(said, flush=True)
        return EXIT_FAILED
    best = min(complete, key=lambda trial: trial.value)
    chosen = spec.trial_run_id(best.number)
    result = read_json(sweep_dir / RESULT_FILE)
    if result is None or result.get("chosen") != chosen:
        result = {
            "sweep_id": spec.sweep_id,
            "chosen": chosen,
            "trial": best.number,
            "values": best.params,
            "val_mae": best.value,
            "compared_on": "validation MAE (the test split of no trial was looked at)",
            "test": _evaluate_test(spec, chosen),
            "test_evaluated_at": time.time(),
        }
        write_json_atomic(sweep_dir / RESULT_FILE, result)
    _write_report(spec, sweep_dir, rows, result)
    test = result["test"]
    print(
        f"sweep {spec.sweep_id}: chose {chosen} (validation MAE {best.value:.2f}); its test "
        f"MAE {test['mae']:.2f} mg/dL vs baseline {test['baseline']['mae']:.2f}, "
        "evaluated once",
        flush=True,
    )
    return EXIT_FINISHED


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"`--{name} {value}`" for name, value in values.items())


def _write_report(spec: SweepSpec, sweep_dir: Path, rows: list[dict], result: dict | None) -> None:
    ranked = sorted(rows, key=lambda r: (r["val_mae"] is None, r["val_mae"] or 0.0))
    names = [param.split("=", 1)[0] for param in spec.params]
    lines = [
        f"# Sweep {spec.sweep_id}" + (f" ({spec.name})" if spec.name else ""),
        "",
        f"Dataset `{spec.dataset}`; {spec.method} search over "
        + ", ".join(f"`{param}`" for param in spec.params)
        + f"; {len(rows)} of {spec.trials} trials, {spec.concurrent} at a time"
        + (", median pruning on validation MAE" if spec.prune else "")
        + ".",
        "",
        "**How the trial was chosen.** Trials were compared on the validation split only "
        "(each ran with `--skip-test`). The test split was evaluated once, after the "
        "search, for the chosen trial alone.",
        "",
    ]
    if result is not None:
        test = result["test"]
        lines += [
            f"## Chosen: {result['chosen']}",
            "",
            f"Values {_values(result['values'])}; validation MAE {result['val_mae']:.2f} mg/dL.",
            f"Test ({test['n']} windows, cases no trial trained or was chosen on): MAE "
            f"{test['mae']:.2f} mg/dL vs constant-median baseline "
            f"{test['baseline']['mae']:.2f}.",
            "",
        ]
    else:
        lines += ["## No trial finished: nothing was chosen, the test split is untouched.", ""]
    lines += [
        "## Trials, best validation MAE first",
        "",
        "| # | trial | state | " + " | ".join(names) + " | validation MAE |",
        "|---" * (len(names) + 4) + "|",
    ]
    for place, row in enumerate(ranked, start=1):
        values = [str(row["values"].get(name, "-")) for name in names]
        mae = f"{row['val_mae']:.2f}" if row["val_mae"] is not None else "-"
        lines.append(
            f"| {place} | {row['run_id']} | {row['state']} | {' | '.join(values)} | {mae} |"
        )
    lines += ["", *(f"![{shows}]({PLOTS_DIR}/{stem}.png)" for stem, (_, shows) in PLOTS.items())]
    lines += [""]
    (sweep_dir / REPORT_FILE).write_text("\n".join(lines))
