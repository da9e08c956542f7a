"""report.md: titled with the run, its time over every process, its settings and cost."""

from __future__ import annotations

import json
import shutil

import numpy as np

from trainer.config import train_flag_fields
from trainer.flags import flag_name
from trainer.reports.progress import START_RECORD, process_spans
from trainer.reports.report import write_report


def _report(run_dir) -> list[str]:
    return (run_dir / "report.md").read_text().splitlines()


def test_the_report_is_titled_with_the_run_id_its_model_and_its_data(trained_run):
    assert _report(trained_run)[0] == "# Run `tiny-run`: resnet18 on 5 synth cases"


def _settings(run_dir) -> list[str]:
    lines = _report(run_dir)
    return lines[lines.index("## Settings (config.json)") :]


def test_the_report_lists_every_flag_the_run_trained_with(trained_run):
    config = json.loads((trained_run / "config.json").read_text())
    settings = _settings(trained_run)
    assert "| `--model` | resnet18 | resnet34 |" in settings
    assert "| `--epochs` | 2 | 20 |" in settings
    assert f"| `--lr` | {config['optim']['lr']:g} (the trainer's) |  |" in settings
    assert "| `--checkpoint-uri` | none |  |" in settings
    assert "| `--checkpoint-every` | 600 s |  |" in settings
    assert "| `--no-graph` | off |  |" in settings and "| `--name` | none |  |" in settings
    assert f"| `--run-dir` | {trained_run} |  |" in settings
    flags = {line.split("`")[1] for line in settings if line.startswith("| `")}
    assert flags == {flag_name(field) for _, _, field in train_flag_fields()}


def test_a_flag_left_to_the_trainer_is_the_trainers_not_a_change(trained_run):
    settings = _settings(trained_run)
    for flag in ("--formulation", "--beta2", "--decay-norms-and-biases", "--precision"):
        (row,) = [line for line in settings if line.startswith(f"| `{flag}` |")]
        assert row.endswith("(the trainer's) |  |"), row


def test_a_flag_the_trainer_would_pick_but_the_run_gave_shows_the_trainers_rule(trained_run):
    # The tiny run gives --batch-size 32.
    assert (
        "| `--batch-size` | 32 (32 a rank x 1) | the trainer's: a power of two from 1024 to "
        "16384 over all GPUs, 1600+ steps an epoch; 256 on a CPU |"
    ) in _settings(trained_run)


def test_a_changed_checkpoint_interval_shows_its_default(trained_run, tmp_path):
    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, "checkpoint_every_seconds": 90.0}))
    summary = json.loads((run_dir / "summary.json").read_text())
    write_report(run_dir, summary, np.array([100.0, 150.0]), np.array([110.0, 140.0]))
    assert "| `--checkpoint-every` | 90 s | 600 s |" in _settings(run_dir)


def test_the_report_names_every_flag_that_differs_from_its_default(trained_run, tmp_path):
    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    config = json.loads((run_dir / "config.json").read_text())
    config["model"].update(dropout=0.0, kernel_size=7)
    config["optim"].update(weight_decay=0.05, warmup_fraction=0.1, min_lr_fraction=0.0,
                           grad_clip_norm=0.5)  # fmt: skip
    (run_dir / "config.json").write_text(json.dumps(config))
    summary = json.loads((run_dir / "summary.json").read_text())
    write_report(run_dir, summary, np.array([100.0, 150.0]), np.array([110.0, 140.0]))
    lines = _report(run_dir)
    for row in ("| `--dropout` | 0 | 0.2 |", "| `--kernel-size` | 7 | 3 |",
                "| `--weight-decay` | 0.05 | 0.01 |", "| `--warmup-fraction` | 0.1 | 0.05 |",
                "| `--min-lr-fraction` | 0 | 0.02 |", "| `--grad-clip` | 0.5 | 1 |",
                "| `--seed` | 0 |  |"):  # fmt: skip
        assert row in lines, row


def _rewritten(trained_run, tmp_path, **summary_changes) -> list[str]:
    """report.md of a copy of the run, written again from its summary with changes."""
    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    summary = {**json.loads((run_dir / "summary.json").read_text()), **summary_changes}
    write_report(run_dir, summary, np.array([100.0, 150.0]), np.array([110.0, 140.0]))
    return _report(run_dir)


def test_a_resumed_runs_report_says_the_whole_time_and_each_starts(trained_run, tmp_path):
    processes = [{"started_at": 0, "from_step": 0, "wall_s": 4.0},
                 {"started_at": 90, "from_step": 3, "wall_s": 120.0}]  # fmt: skip
    lines = _rewritten(trained_run, tmp_path, wall_s=124.0, processes=processes)
    assert ", 124 s over 2 starts (4, 120 s)." in lines[2]


def test_the_report_gives_the_cost_when_the_summary_has_it(trained_run, tmp_path):
    assert "Cost: not counted (no box records: a run outside `fab train`)." in _report(trained_run)
    cost = {"usd": 3.46, "box_hours": [2.0], "hourly_price_usd": 1.73}
    assert "Cost $3.46: 2.00 box-hours up at $1.73/h (the boxes' own boot and stop records)." in (
        _rewritten(trained_run, tmp_path, cost_usd=3.46, cost=cost)
    )


def test_each_process_counts_from_its_start_to_its_last_kept_record():
    records = [
        {"kind": START_RECORD, "step": 0, "time": 100.0},
        {"kind": "train", "step": 1, "time": 104.0},
        {"kind": START_RECORD, "step": 1, "time": 500.0},  # a resume
        {"kind": "train", "step": 2, "time": 530.0},
    ]
    assert process_spans(records, now=560.0) == [
        {"started_at": 100.0, "from_step": 0, "wall_s": 4.0},
        {"started_at": 500.0, "from_step": 1, "wall_s": 60.0},
    ]
