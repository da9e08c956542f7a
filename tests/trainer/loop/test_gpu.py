"""What only a CUDA GPU can show: the run's GPU memory figure, --deterministic's bitwise
resume, fp16 with its GradScaler, --compile, the captured step against the eager one
(accumulated too), an empty share kept from cuDNN, evaluation's capture beside another
thread's CUDA calls,
the data-parallel step captured with its NCCL all-reduce (one rank under torchrun)
against DDP's, a CPU run resumed on the GPU, a formulation timing that runs out of
memory. They skip without CUDA (CI, the build machines); on a GPU machine they run as
they are (measured on an H100)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.paths import REPO, TESTS_DIR
from tests.trainer.trainer_process import EXIT_WAIT_SECONDS, start_process, start_training
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


def test_a_compiled_gpu_run_trains_captured_and_resumes(tiny_data, tmp_path):
    _train(tiny_data, tmp_path / "run", "--compile", "--max-steps", "6")
    _train(tiny_data, tmp_path / "run", "--compile", "--max-steps", "8")
    assert checkpoint_file.load(tmp_path / "run/checkpoints/last.pt")["step"] == 8
    log = (tmp_path / "run.log").read_text()
    assert "steps: one CUDA graph, replayed" in log and "capture failed" not in log


def test_auto_formulation_on_a_gpu_is_timed_and_recorded(tiny_data, tmp_path):
    _train(tiny_data, tmp_path / "run", "--max-steps", "1")
    recorded = json.loads((tmp_path / "run/config.json").read_text())["train"]["formulation"]
    assert recorded in ("gemm", "torch", "nhwc")
    assert "formulation: " in (tmp_path / "run.log").read_text()


@pytest.mark.parametrize("accum", ["1", "2"])  # 2: an accumulate-only graph, a stepping one
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_captured_steps_train_the_eager_steps_weights_bitwise(
    tiny_data, tmp_path, precision, accum
):
    if precision == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("this GPU has no native bf16")
    flags = ("--deterministic", "--precision", precision, "--grad-accum", accum, "--max-steps", "8")
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


TORCHRUN_ONE_RANK = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1")


def test_the_captured_bucket_step_over_one_nccl_rank_trains_ddps_weights_bitwise():
    script = TESTS_DIR / "trainer" / "dp_against_ddp.py"
    result = subprocess.run(
        [sys.executable, *TORCHRUN_ONE_RANK, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=EXIT_WAIT_SECONDS,
        env={**os.environ, "GLUCOSE_IMDS_URL": "off"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the bucket step trains DDP's weights bitwise" in result.stdout


def test_a_one_rank_torchrun_captures_the_data_parallel_step(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    command = [*TORCHRUN_ONE_RANK, "-m", "trainer", "train", "--data", str(tiny_data)]
    command += ["--run-dir", str(run_dir), "--batch-size", "32", "--max-steps", "8"]
    process = start_process(command, tmp_path / "run.log")
    assert process.wait(EXIT_WAIT_SECONDS) == 0, (tmp_path / "run.log").read_text()
    log = (tmp_path / "run.log").read_text()
    assert "data parallel: world size 1 (nccl)" in log
    assert "steps: one CUDA graph, replayed" in log and "capture failed" not in log
    assert checkpoint_file.load(run_dir / "checkpoints/last.pt")["step"] == 8


def test_a_run_started_on_the_cpu_resumes_on_the_gpu_with_the_captured_step(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    flags = ("--model", "resnet18", "--precision", "fp32")
    on_the_cpu = {"CUDA_VISIBLE_DEVICES": ""}
    cpu = start_training(
        tiny_data, run_dir, "--batch-size", "32", *flags, "--max-steps", "4", env=on_the_cpu
    )
    assert cpu.wait(EXIT_WAIT_SECONDS) == 0, (tmp_path / "run.log").read_text()
    _train(tiny_data, run_dir, *flags, "--max-steps", "10")
    log = (tmp_path / "run.log").read_text()
    assert "resume: step 4" in log and "capture failed" not in log
    state = checkpoint_file.load(run_dir / "checkpoints/last.pt")
    assert state["step"] == 10
    assert all(torch.isfinite(value).all() for value in state["model"].values())


def test_a_formulation_timing_that_runs_out_of_memory_is_one_line_naming_the_fix():
    from trainer.config import ModelConfig, UserError
    from trainer.loop.device import choose_device
    from trainer.loop.formulation import fastest_formulation

    choice = choose_device("auto")
    torch.cuda.set_per_process_memory_fraction(0.01, choice.device)  # ~1 GB of an H100
    try:
        with pytest.raises(UserError, match=r"ran out of GPU memory .* smaller --batch-size"):
            fastest_formulation(ModelConfig("resnet34"), choice, 65536, 100, ("torch", "nhwc"))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, choice.device)
        torch.cuda.empty_cache()


def _gpu_step(formulation: str):
    from trainer.config import ModelConfig
    from trainer.loop.device import DeviceChoice
    from trainer.loop.step import TrainStep
    from trainer.model import build_model

    choice = DeviceChoice(torch.device("cuda"), "fp32", "GPU")
    torch.manual_seed(0)
    model = build_model(ModelConfig("resnet18"), choice.device, formulation).train()
    optimizer = choice.optimizer(model.parameters(), 1e-3, 1e-2)
    return TrainStep(model, list(model.parameters()), optimizer, None, choice, 1.0, False)


def test_an_empty_share_of_a_short_batch_runs_nothing_through_cudnn():
    empty, whole = _gpu_step("torch"), _gpu_step("torch")
    x, y = torch.randn(8, 1, 64, device="cuda"), torch.randn(8, device="cuda")
    empty(x, y, 1 / 8, steps=False)
    loss = empty(x[:0], y[:0], 1 / 8, steps=True, full=False)
    whole(x, y, 1 / 8, steps=True)
    assert float(loss) == 0.0
    pairs = zip(
        empty.trained.state_dict().values(), whole.trained.state_dict().values(), strict=True
    )
    for a, b in pairs:
        torch.testing.assert_close(a, b)


def test_the_evaluation_graph_is_captured_while_another_thread_calls_cuda():
    # capture_error_mode "global" voided it: the step deadline queries CUDA events and a
    # checkpoint copies to the host from other threads.
    import threading

    from trainer.loop.step import EvalForward

    step = _gpu_step("torch")
    lines: list[str] = []
    forward = EvalForward(step.trained.eval(), step.choice, True, lines.append)
    stop = threading.Event()

    def query() -> None:
        while not stop.is_set():
            try:
                torch.cuda.Event().query()
                torch.cuda.current_stream().query()
            except RuntimeError:
                pass

    other = threading.Thread(target=query, daemon=True)
    other.start()
    try:
        with torch.inference_mode():
            forward(torch.randn(64, 1, 64, device="cuda"), full=True)
    finally:
        stop.set()
        other.join()
    assert lines == [] and forward._graph is not None
