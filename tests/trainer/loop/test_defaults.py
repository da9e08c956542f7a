"""The settings a run leaves to the trainer (global batch, learning rate, formulation):
chosen at the first start for the device and the ranks, kept by every resume."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from tests.trainer.conftest import tiny_run_config
from trainer.checkpoints import checkpoint_file
from trainer.config import DataConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig, UserError
from trainer.loop.defaults import (
    CPU_BATCH,
    GLOBAL_BATCH_RANGE,
    LR_SCALED_UP_TO_BATCH,
    MIN_BETA2,
    MIN_STEPS_PER_EPOCH,
    default_beta2,
    default_lr,
    global_batch,
    memory_batch_cap,
    parameter_groups,
    per_rank_batch,
    settle,
    step_parts,
)
from trainer.loop.device import choose_device
from trainer.loop.formulation import MARGIN, fastest_formulation, resolve_formulation
from trainer.loop.run import lr_lambda
from trainer.loop.train import train
from trainer.model import FORMULATIONS, build_model

CPU, GPU = torch.device("cpu"), torch.device("cuda")
SMALL = 100_000  # training windows: the smallest GPU batch's data


def _config(world_size: int = 1, **train) -> RunConfig:
    config = RunConfig(DataConfig("data"), TrainConfig(run_dir="run", **train))
    return config.with_world_size(world_size)


def _no_timing() -> str:
    raise AssertionError("no formulation should have been timed")


@pytest.mark.parametrize("train_windows", [SMALL, 1_680_000, 8_400_000, 16_000_000])
def test_the_default_global_batch_is_the_same_at_any_gpu_count(train_windows):
    one = settle(_config(), GPU, saved=None, train_windows=train_windows).train.batch_size
    for gpus in (2, 3, 4, 8):
        settled = settle(_config(world_size=gpus), GPU, saved=None, train_windows=train_windows)
        assert settled.train.batch_size == one
        assert settled.train.per_rank_batch_size == -(-one // gpus)


def test_eight_gpus_of_a_small_set_take_128_windows_each_not_1024():
    settled = settle(_config(world_size=8), GPU, saved=None, train_windows=SMALL)
    assert (settled.train.batch_size, settled.train.per_rank_batch_size) == (1024, 128)


def test_without_batch_size_cpu_ranks_take_256_windows_between_them():
    settled = settle(_config(world_size=2), CPU, saved=None, train_windows=SMALL)
    assert (settled.train.batch_size, settled.train.per_rank_batch_size) == (256, 128)


def test_the_memory_cap_bounds_a_ranks_share_of_the_default_global_batch():
    # 16 M windows want 8192; a GPU that holds 2048 takes 2048 alone, 8192 over 4 GPUs.
    assert global_batch("cuda", 16_000_000, 1, cap=2048) == 2048
    assert global_batch("cuda", 16_000_000, 4, cap=2048) == 8192
    assert global_batch("cuda", 16_000_000, 8, cap=2048) == 8192


def test_a_share_too_large_for_the_memory_is_computed_in_parts():
    assert step_parts(8192, 2048) == 4
    assert step_parts(1366, 1024) == 2
    assert step_parts(1024, 1024) == step_parts(256, None) == 1


def test_the_default_gpu_batch_is_the_largest_power_of_two_leaving_1600_steps_an_epoch():
    assert per_rank_batch("cuda", 8_400_000) == 4096  # M3's training windows: 2050 steps
    assert per_rank_batch("cuda", 16_000_000) == 8192  # 1953 steps
    assert per_rank_batch("cuda", 16_000_000, world_size=4) == 2048
    assert MIN_STEPS_PER_EPOCH == 1600


def test_the_default_gpu_batch_stays_within_its_bounds_and_a_cpu_keeps_256():
    assert per_rank_batch("cuda", 1_680_000) == GLOBAL_BATCH_RANGE[0] == 1024  # M2, measured best
    assert per_rank_batch("cuda", 1_000) == 1024
    assert per_rank_batch("cuda", 100_000_000) == GLOBAL_BATCH_RANGE[1] == 16384
    assert per_rank_batch("cpu", 8_400_000) == 256


def test_the_flags_help_states_the_rules_the_trainer_applies():
    auto = {item.name: item.metadata.get("auto") for item in dataclasses.fields(TrainConfig)}
    auto |= {item.name: item.metadata.get("auto") for item in dataclasses.fields(OptimConfig)}
    low, high = GLOBAL_BATCH_RANGE
    for number in (low, high, MIN_STEPS_PER_EPOCH, CPU_BATCH):
        assert str(number) in auto["batch_size"]
    assert f"batch {LR_SCALED_UP_TO_BATCH}" in auto["lr"]
    assert f"{MIN_BETA2:g}" in auto["beta2"]


def test_a_gpu_run_settles_the_batch_its_training_set_gives():
    settled = settle(_config(world_size=2), GPU, saved=None, train_windows=8_400_000)
    assert (settled.train.batch_size, settled.train.per_rank_batch_size) == (4096, 2048)
    assert settled.optim.lr == pytest.approx(default_lr(4096))


def test_the_default_learning_rate_grows_with_the_square_root_of_the_global_batch():
    assert default_lr(256) == pytest.approx(2e-3)
    assert default_lr(512) == pytest.approx(2e-3 * math.sqrt(2))
    assert default_lr(1024) == pytest.approx(2e-3 * math.sqrt(4))


def test_the_default_learning_rate_stops_growing_at_4e_3():
    assert default_lr(4096) == default_lr(16384) == default_lr(131072) == pytest.approx(4e-3)
    settled = settle(_config(world_size=4), GPU, saved=None, train_windows=SMALL)
    assert settled.optim.lr == pytest.approx(4e-3)


def test_beta2_is_torchs_at_the_reference_batch_and_lower_at_larger_ones_down_to_0_95():
    assert default_beta2(256) == 0.999 and default_beta2(64) == 0.999
    assert default_beta2(1024) == pytest.approx(0.996)
    assert default_beta2(8192) == pytest.approx(0.968)
    assert default_beta2(16384) == default_beta2(131072) == 0.95


def test_a_fresh_run_settles_beta2_and_no_decay_on_norms_and_biases():
    settled = settle(_config(), GPU, saved=None, train_windows=8_400_000)
    assert (settled.optim.beta2, settled.optim.decay_norms_and_biases) == (0.984, False)


def test_a_run_from_before_those_settings_resumes_with_the_old_ones():
    saved = {"train": {"batch_size": 8192}, "optim": {"lr": 0.011}}
    settled = settle(_config(), GPU, saved=saved, train_windows=1_680_000)
    assert (settled.optim.beta2, settled.optim.decay_norms_and_biases) == (0.999, True)


def test_norms_and_biases_take_no_weight_decay_convolution_and_linear_weights_do():
    model = build_model(ModelConfig("resnet18"))
    decayed, spared = parameter_groups(model, 0.01, decay_all=False)
    assert decayed["weight_decay"] == 0.01 and spared["weight_decay"] == 0.0
    names = {id(p): name for name, p in model.named_parameters()}
    spared_names = {names[id(p)] for p in spared["params"]}
    assert spared_names == {n for n, p in model.named_parameters() if p.ndim == 1}
    assert any(".bn" in n or "norm" in n or n.endswith(".bias") for n in spared_names)
    assert all(p.ndim > 1 for p in decayed["params"])
    (everything,) = parameter_groups(model, 0.01, decay_all=True)
    assert len(everything["params"]) == len(list(model.parameters()))


def test_a_batch_that_would_not_fit_beside_the_data_is_halved_until_it_does():
    gib = 2**30
    assert memory_batch_cap(80 * gib, 2 * gib, "bf16").per_rank == 16384  # an H100
    # 16 GB V100 at M3 (3.4 GB resident): 16384 and 8192 would not fit, 4096 does
    assert memory_batch_cap(15 * gib, 3.4 * gib, "fp16").per_rank == 4096
    assert memory_batch_cap(1 * gib, 0.9 * gib, "fp32").per_rank == GLOBAL_BATCH_RANGE[0]


def test_the_memory_cap_bounds_the_default_batch_only_from_above():
    assert per_rank_batch("cuda", 16_000_000, cap=4096) == 4096
    assert per_rank_batch("cuda", 1_000, cap=4096) == 1024
    settled = settle(_config(), GPU, saved=None, train_windows=16_000_000, batch_cap=2048)
    assert settled.train.batch_size == 2048


def test_flags_win_over_every_default():
    config = dataclasses.replace(_config(batch_size=96), optim=OptimConfig(lr=5e-4))
    settled = settle(
        config,
        GPU,
        saved={"train": {"batch_size": 8192}, "optim": {"lr": 1.0}},
        train_windows=SMALL,
    )
    assert (settled.train.batch_size, settled.optim.lr) == (96, 5e-4)


def test_a_resume_on_a_box_with_fewer_gpus_keeps_the_runs_global_batch_and_lr():
    saved = {"train": {"batch_size": 8192, "formulation": "nhwc"}, "optim": {"lr": 0.011}}
    settled = settle(_config(world_size=4), GPU, saved=saved, train_windows=SMALL)
    assert (settled.train.batch_size, settled.train.per_rank_batch_size) == (8192, 2048)
    assert (settled.optim.lr, settled.train.formulation) == (0.011, "nhwc")


def test_a_gpu_runs_nhwc_resumed_on_a_cpu_trains_gemm():
    saved = {"train": {"batch_size": 1024, "formulation": "nhwc"}, "optim": {"lr": 4e-3}}
    settled = settle(_config(), CPU, saved=saved, train_windows=SMALL)
    assert resolve_formulation(settled, CPU, _no_timing).train.formulation == "gemm"


def test_auto_formulation_on_a_cpu_is_gemm_without_timing():
    assert resolve_formulation(_config(), CPU, _no_timing).train.formulation == "gemm"


def test_auto_formulation_on_a_gpu_is_the_one_timed_fastest():
    assert resolve_formulation(_config(), GPU, lambda: "nhwc").train.formulation == "nhwc"


def test_deterministic_mode_takes_the_gpu_default_instead_of_a_timing():
    torch.use_deterministic_algorithms(True)
    try:
        resolved = resolve_formulation(_config(), GPU, _no_timing)
    finally:
        torch.use_deterministic_algorithms(False)
    assert resolved.train.formulation == "torch"


def test_nhwc_on_the_cpu_is_refused_by_name():
    with pytest.raises(UserError, match="--formulation nhwc is not for the CPU"):
        resolve_formulation(_config(formulation="nhwc"), CPU, _no_timing)


def test_the_fastest_formulation_is_picked_from_real_timings_near_ties_keep_the_default():
    choice = choose_device("auto")
    name, seconds = fastest_formulation(ModelConfig("resnet18"), choice, 8, 64, FORMULATIONS)
    assert set(seconds) == set(FORMULATIONS) and all(s > 0 for s in seconds.values())
    fastest = min(seconds.values())
    if name == "gemm":  # the CPU's default stays unless beaten by the margin
        assert fastest > (1 - MARGIN) * seconds["gemm"]
    else:
        assert seconds[name] == fastest <= (1 - MARGIN) * seconds["gemm"]


def test_a_run_without_batch_size_or_lr_records_the_defaults_it_trained_with(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, batch_size=None, max_steps=1)) == 0
    recorded = json.loads((run_dir / "config.json").read_text())
    assert recorded["train"]["batch_size"] == 256 and recorded["optim"]["lr"] == 2e-3
    assert recorded["train"]["formulation"] == "gemm"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["global_batch_size"], summary["lr"]) == (256, 2e-3)
    assert summary["gpu_memory_gib"] is None  # a GPU run says how much it took


def test_a_resume_without_batch_size_keeps_the_runs_own(tiny_data, tmp_path):
    # Started where the default was 64 windows (a box of other ranks), resumed here
    # without --batch-size: the run's 64, not this box's 256.
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, batch_size=64, max_steps=1)) == 0
    assert train(tiny_run_config(tiny_data, run_dir, batch_size=None, max_steps=3)) == 0
    state = checkpoint_file.load(run_dir / "checkpoints/last.pt")
    assert (state["step"], state["config"]["train"]["batch_size"]) == (3, 64)


def test_the_warm_up_lasts_at_least_one_epoch_and_none_without_a_share():
    factor = lr_lambda(1000, warmup_fraction=0.05, min_lr_fraction=0.02, steps_per_epoch=200)
    assert factor(0) == pytest.approx(1 / 200) and factor(199) == 1.0  # not 5%'s 50 steps
    longer = lr_lambda(10_000, warmup_fraction=0.05, min_lr_fraction=0.02, steps_per_epoch=200)
    assert longer(199) == pytest.approx(200 / 500)  # 5% of 10,000 is longer than an epoch
    assert lr_lambda(1000, warmup_fraction=0.0, min_lr_fraction=0.02, steps_per_epoch=200)(0) == 1
