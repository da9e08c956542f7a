import dataclasses
import json
import math
import signal

import pytest
import torch

from box.contract import EXIT_STOPPED
from tests.trainer.conftest import TINY_WINDOWS_PER_CASE, tiny_run_config
from tests.trainer.trainer_process import (
    EXIT_WAIT_SECONDS,
    output_of,
    start_training,
    wait_for_exit,
    wait_for_step,
)
from trainer.__main__ import main
from trainer.checkpoints import checkpoint_file
from trainer.loop.run import COMPILE_CACHE
from trainer.loop.train import train

RUN_DIR_FILES = (
    "splits.json",
    "config.json",
    "status.json",
    "metrics.jsonl",
    "summary.json",
    "report.md",
    "checkpoints/last.pt",
    "checkpoints/last.pt.sha256",
    "checkpoints/best.pt",
    "plots/learning_curve.png",
    "plots/clarke_grid.png",
)


def test_tiny_run_writes_every_run_dir_file(trained_run):
    missing = [name for name in RUN_DIR_FILES if not (trained_run / name).is_file()]
    assert not missing
    assert any((trained_run / "tb").iterdir())


def test_finished_run_reports_finished_status(trained_run):
    status = json.loads((trained_run / "status.json").read_text())
    assert status["state"] == "finished" and status["exit_code"] == 0
    assert status["step"] == status["total_steps"]


def test_splits_json_holds_disjoint_case_lists(trained_run):
    splits = json.loads((trained_run / "splits.json").read_text())
    assert not set(splits["train"]) & (set(splits["val"]) | set(splits["test"]))


def test_summary_holds_val_and_test_with_baseline(trained_run):
    summary = json.loads((trained_run / "summary.json").read_text())
    assert {"mae", "baseline"} <= set(summary["test"]) and "mae" in summary["val"]


def test_resume_from_last_continues_the_step_count(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2)) == 0
    assert checkpoint_file.load(run_dir / "checkpoints/last.pt")["step"] == 2
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=5)) == 0
    assert checkpoint_file.load(run_dir / "checkpoints/last.pt")["step"] == 5
    steps = [
        r["step"]
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    assert steps == [1, 2, 3, 4, 5]


def test_a_resumed_runs_time_is_the_sum_of_its_processes_each_kept(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2)) == 0
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=5)) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    first, second = summary["processes"]
    assert (first["from_step"], second["from_step"]) == (0, 2)
    assert first["started_at"] < second["started_at"]
    assert first["wall_s"] > 0 and second["wall_s"] > 0
    assert summary["wall_s"] == pytest.approx(first["wall_s"] + second["wall_s"])


def test_step_and_validation_records_count_epochs_alike_from_1(trained_run):
    records = [
        json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()
    ]
    done = 0  # epochs validated so far
    for record in records:
        if record["kind"] == "train":
            assert record["epoch"] == done + 1, record
        elif record["kind"] == "epoch":
            done += 1
            assert record["epoch"] == done, record
    assert done == 2


def test_interrupted_and_resumed_run_ends_with_identical_weights(tiny_data, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train(tiny_run_config(tiny_data, straight, max_steps=6)) == 0
    # checkpoint every step, stop mid-epoch at step 3, resume to the same end
    assert train(tiny_run_config(tiny_data, split, max_steps=3)) == 0
    assert train(tiny_run_config(tiny_data, split, max_steps=6)) == 0
    a = checkpoint_file.load(straight / "checkpoints/last.pt")["model"]
    b = checkpoint_file.load(split / "checkpoints/last.pt")["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_resume_with_another_batch_size_is_a_user_error(tiny_data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=1)) == 0
    code = main(
        [
            "train",
            "--data",
            str(tiny_data),
            "--run-dir",
            str(run_dir),
            "--model",
            "resnet18",
            "--batch-size",
            "16",
        ]
    )
    assert code == 2 and "train.batch_size was 32" in capsys.readouterr().err


def test_refused_resume_leaves_the_runs_config_json(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=1)) == 0
    flags = ["--data", str(tiny_data), "--run-dir", str(run_dir), "--model", "resnet18"]
    assert main(["train", *flags, "--batch-size", "16"]) == 2
    assert json.loads((run_dir / "config.json").read_text())["train"]["batch_size"] == 32


def test_sigterm_saves_a_checkpoint_and_exits_75(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    flags = ("--epochs", "1000", "--batch-size", "32")
    proc = start_training(tiny_data, run_dir, *flags)
    try:
        wait_for_step(run_dir, 1, proc)
        proc.send_signal(signal.SIGTERM)
        code = wait_for_exit(proc, run_dir)
    finally:
        proc.kill()
    assert code == EXIT_STOPPED, output_of(run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["exit_code"] == EXIT_STOPPED
    assert checkpoint_file.load(run_dir / "checkpoints/last.pt")["step"] == status["step"]


def test_grad_accumulation_steps_once_per_group_and_at_epoch_end(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    config = tiny_run_config(tiny_data, run_dir, epochs=1)
    config = dataclasses.replace(config, optim=dataclasses.replace(config.optim, grad_accum=2))
    assert train(config) == 0
    micro_batches = math.ceil(
        len(json.loads((run_dir / "splits.json").read_text())["train"]) * TINY_WINDOWS_PER_CASE / 32
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == math.ceil(micro_batches / 2)


def test_bad_flag_value_is_one_line_and_exit_2(tiny_data, tmp_path, capsys):
    code = main(["train", "--data", str(tiny_data), "--run-dir", str(tmp_path), "--epochs", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--epochs 0" in err


@pytest.mark.parametrize(
    "flags",
    [
        ("--log-every", "0"),
        ("--checkpoint-every-steps", "0"),
        ("--checkpoint-every", "-1"),
        ("--max-steps", "0"),
    ],
)
def test_bad_flag_error_names_the_flag_and_the_value_seen(tiny_data, tmp_path, capsys, flags):
    code = main(["train", "--data", str(tiny_data), "--run-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{flags[0]} {flags[1]}:" in err


@pytest.mark.parametrize("run_dir", ["a-file/run", "a-file"])
def test_a_run_dir_at_or_under_a_regular_file_is_one_line_and_exit_2(
    tiny_data, tmp_path, capsys, run_dir
):
    (tmp_path / "a-file").write_text("not a directory")
    code = main(["train", "--data", str(tiny_data), "--run-dir", str(tmp_path / run_dir)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{tmp_path / 'a-file'} is a file, not a directory" in err


def test_missing_data_dir_error_names_the_data_flag(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code = main(["train", "--data", str(missing), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"--data {missing}:" in err


def test_a_deterministic_run_on_the_cpu_ends_with_the_plain_runs_weights(tiny_data, tmp_path):
    # In a process of its own: deterministic mode is process-wide. On the CPU it only
    # proves every op of the step has a deterministic kernel; on a GPU it changes them.
    runs = {name: tmp_path / name for name in ("plain", "deterministic")}
    flags = {"plain": (), "deterministic": ("--deterministic",)}
    processes = [
        start_training(tiny_data, run_dir, "--batch-size", "32", "--max-steps", "3", *flags[name])
        for name, run_dir in runs.items()
    ]
    assert [process.wait(EXIT_WAIT_SECONDS) for process in processes] == [0, 0]
    a, b = (checkpoint_file.load(run_dir / "checkpoints/last.pt") for run_dir in runs.values())
    assert all(torch.equal(a["model"][key], b["model"][key]) for key in a["model"])
    assert b["config"]["train"]["deterministic"] is True


@pytest.mark.e2e  # inductor compiles resnet18's step: minutes on two shared cores
def test_a_compiled_run_keeps_its_compiled_code_in_the_run_dir_for_its_resumes(
    tiny_data, tmp_path, monkeypatch
):
    # torch sets TORCHINDUCTOR_CACHE_DIR in this process once any in-process run used
    # inductor; the trainer must start without one, as on a box.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    run_dir = tmp_path / "run"
    flags = ("--batch-size", "32", "--compile")
    process = start_training(tiny_data, run_dir, *flags, "--max-steps", "1")
    assert process.wait(EXIT_WAIT_SECONDS) == 0
    cache = run_dir / COMPILE_CACHE
    assert any(path.is_file() for path in cache.rglob("*"))
    log = (tmp_path / "run.log").read_text()
    assert "compile: failed" not in log
