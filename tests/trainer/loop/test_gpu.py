"""What only a CUDA GPU can show: the run's GPU memory figure, --deterministic's bitwise
resume, fp16 with its GradScaler, --compile, the captured step against the eager one.
They skip without CUDA (CI, the build machines); on a GPU machine they run as they are
(measured on an H100)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, start_training
from trainer.checkpoints import checkpoint_file

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _train(data: Path, run_dir: Path, *flags: str) -> None:
    process = start_training(data, run_dir, "--batch-size", "32", *flags)
    assert process.wait(EXIT_WAIT_SECONDS) == 0, (
        run_dir.parent / f"{run_dir.name}.log"
    ).read_text()


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return checkpoint_file.load(run_dir / "checkpoints/last.pt")["model"]


def test_a_gpu_run_says_how_much_gpu_memory_it_took(tiny_data, tmp_path):
    _train(tiny_data, tmp_path / "run", "--max-steps", "2")
    status = json.loads((tmp_path / "run/status.json").read_text())
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert status["gpu_memory_gib"] > 0 and summary["gpu_memory_gib"] > 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_deterministic_gpu_run_stopped_and_resumed_ends_bitwise(tiny_data, tmp_path, precision):
    if precision == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("this GPU has no native bf16")
    flags = ("--deterministic", "--precision", precision)
    _train(tiny_data, tmp_path / "straight", *flags, "--max-steps", "6")
    _train(tiny_data, tmp_path / "split", *flags, "--max-steps", "3")
    _train(tiny_data, tmp_path / "split", *flags, "--max-steps", "6")
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_a_compiled_gpu_run_trains_and_resumes(tiny_data, tmp_path):
    _train(tiny_data, tmp_path / "run", "--compile", "--max-steps", "2")
    _train(tiny_data, tmp_path / "run", "--compile", "--max-steps", "4")
    assert checkpoint_file.load(tmp_path / "run/checkpoints/last.pt")["step"] == 4


def test_auto_formulation_on_a_gpu_is_timed_and_recorded(tiny_data, tmp_path):
    _train(tiny_data, tmp_path / "run", "--max-steps", "1")
    recorded = json.loads((tmp_path / "run/config.json").read_text())["train"]["formulation"]
    assert recorded in ("gemm", "torch", "nhwc")
    assert "formulation: " in (tmp_path / "run.log").read_text()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_captured_steps_train_the_eager_steps_weights_bitwise(tiny_data, tmp_path, precision):
    if precision == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("this GPU has no native bf16")
    flags = ("--deterministic", "--precision", precision, "--max-steps", "12")
    _train(tiny_data, tmp_path / "graph", *flags)
    _train(tiny_data, tmp_path / "eager", *flags, "--no-graph")
    log = (tmp_path / "graph.log").read_text()
    assert "steps: one CUDA graph, replayed" in log and "capture failed" not in log
    a, b = _weights(tmp_path / "graph"), _weights(tmp_path / "eager")
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_bench_records_the_captured_step_and_with_no_graph_the_eager_one(tmp_path, capsys):
    from trainer.__main__ import main

    record = tmp_path / "measured.csv"
    assert main(["bench", "--quick", "--record", str(record)]) == 0
    assert main(["bench", "--quick", "--no-graph", "--record", str(record)]) == 0
    steps = [line.rsplit(",", 1)[1] for line in record.read_text().splitlines()[1:]]
    assert [step.split()[0] for step in steps] == ["graph", "graph", "eager", "eager"]
