"""`fab plan` from measurement: a GPU's captured step cost from its rows at two batch
sizes, a model of the others fitted to them, at the batch the trainer takes for the
dataset, on one GPU and on every GPU of a box."""

from __future__ import annotations

import pytest

from ops.plan import batches, scaling, throughput, workload
from ops.plan import estimate as plan
from ops.plan.throughput import MeasuredThroughput, StepCost
from stack import catalog
from stack.catalog import VmSize
from trainer.config import DataConfig, RunConfig, TrainConfig
from trainer.loop.defaults import GIB, memory_batch_cap, per_rank_batch, settle, train_windows_of

H100 = catalog.GPUS["H100 80GB"]
A100 = catalog.GPUS["A100 80GB"]
TRUE_COST = StepCost(fixed_s=2.5e-3, window_s=1.4e-6)
EAGER_COST = StepCost(fixed_s=12e-3, window_s=5e-6)  # slower than the captured step
M3 = 12_000_000


def _row(gpu: str, batch: int, cost: StepCost, step: str = "graph nhwc") -> MeasuredThroughput:
    rate = cost.windows_per_s(batch)
    return MeasuredThroughput("2026-11-26", gpu, 1, "bf16", batch, 100, rate, None, "2.11", step)


H100_ROWS = tuple(_row("NVIDIA H100 80GB HBM3", batch, TRUE_COST) for batch in (1024, 4096))


def test_two_batch_sizes_give_a_gpus_fixed_cost_a_step_and_cost_a_window():
    cost = throughput.measured_cost(list(H100_ROWS))
    assert cost.fixed_s == pytest.approx(TRUE_COST.fixed_s)
    assert cost.window_s == pytest.approx(TRUE_COST.window_s)


def test_one_batch_size_or_rows_of_an_older_step_give_no_cost():
    assert throughput.measured_cost([H100_ROWS[0]]) is None
    older = _row("NVIDIA H100 80GB HBM3", 8192, StepCost(0.02, 1e-6), step="eager torch")
    assert throughput.measured_cost([older, H100_ROWS[0]]) is None


def test_a_measured_gpu_is_planned_at_its_own_cost_at_the_batch_asked():
    tp = throughput.throughput(H100, 1, 100, H100_ROWS, batch=16384)
    assert tp.source == "measured" and "batch 16384" in tp.detail
    assert tp.windows_per_s == pytest.approx(TRUE_COST.windows_per_s(16384))


def test_the_model_fitted_to_one_gpu_reproduces_its_rows():
    model = throughput.fit_step_model(H100_ROWS, 100)
    assert model.gpus == 1 and model.fixed_s == pytest.approx(TRUE_COST.fixed_s)
    for row in H100_ROWS:
        modelled = model.cost(H100, 100).windows_per_s(row.batch_size)
        assert modelled == pytest.approx(row.train_windows_per_s)


def test_a_gpu_without_rows_is_modelled_by_its_compute_and_memory_against_the_measured():
    tp = throughput.throughput(A100, 1, 100, H100_ROWS, batch=4096)
    assert tp.source == "modelled"
    flops, traffic = workload.train_flops_per_window(100), workload.train_bytes_per_window(100)

    def compute_and_memory_s(gpu):
        return flops / (gpu.bf16_tflops * 1e12) + traffic / (gpu.memory_tb_s * 1e12)

    window_s = TRUE_COST.window_s * compute_and_memory_s(A100) / compute_and_memory_s(H100)
    assert tp.windows_per_s == pytest.approx(4096 / (TRUE_COST.fixed_s + 4096 * window_s))


def test_the_plan_costs_the_batch_the_trainer_takes_for_the_dataset():
    config = RunConfig(DataConfig("data"), TrainConfig(run_dir="run"))
    trainer_batch = settle(config, _Cuda(), None, train_windows_of(M3)).train.batch_size
    assert trainer_batch == batches.planned_batch(M3, 1) == 4096
    size = VmSize("test.h100", "aws", "H100 80GB", 1, 80, 26, 200, 4.0, None, "us-east-1",
                  ("us-east-1",))  # fmt: skip
    row = plan.make_plan(plan.PlanRequest(windows=M3, epochs=1), (size,), measured=H100_ROWS).rows[
        0
    ]
    assert row.windows_per_s == pytest.approx(TRUE_COST.windows_per_s(trainer_batch))


def test_several_gpus_replay_the_captured_step_by_default():
    eager = tuple(
        _row("NVIDIA H100 80GB HBM3", batch, EAGER_COST, step="eager torch")
        for batch in (1024, 4096)
    )
    eight = throughput.throughput(H100, 8, 100, H100_ROWS + eager, "NVLink 4", batch=1024)
    per_gpu = TRUE_COST.windows_per_s(1024)
    all_reduce = scaling.ddp_scaling(per_gpu, 1024, 8, "NVLink 4")
    assert eight.step == "graph" and "after the backward pass" in eight.detail
    assert eight.windows_per_s == pytest.approx(per_gpu * 8 * all_reduce.efficiency)


def test_a_box_is_planned_at_the_per_rank_batch_the_trainer_takes_for_the_dataset():
    size = VmSize("test.h100.x4", "aws", "H100 80GB", 4, 80, 96, 800, 16.0, None, "us-east-1",
                  ("us-east-1",), gpu_link="NVLink 4")  # fmt: skip
    request = plan.PlanRequest(windows=M3, epochs=1)
    row = plan.make_plan(request, (size,), measured=H100_ROWS).rows[0]
    batch = per_rank_batch("cuda", train_windows_of(M3), 4)
    per_gpu = TRUE_COST.windows_per_s(batch)
    all_reduce = scaling.ddp_scaling(per_gpu, batch, 4, "NVLink 4")
    assert row.windows_per_s == pytest.approx(4 * per_gpu * all_reduce.efficiency)


def test_a_gpu_whose_memory_holds_less_is_planned_at_the_batch_the_trainer_caps_it_to():
    t4 = catalog.GPUS["T4"]
    size = VmSize("test.t4", "azure", "T4", 1, 16, 4, 28, 1.0, None, "eastus", ("eastus",))
    windows = 5 * M3  # a data set whose default batch is 16384
    request = plan.PlanRequest(windows=windows, epochs=1)
    row = plan.make_plan(request, (size,), measured=H100_ROWS).rows[0]
    data_bytes = windows * 100 * 4  # float32 windows, all resident on the GPU
    cap = memory_batch_cap(t4.memory_gib * GIB, data_bytes, "fp16").per_rank
    batch = per_rank_batch("cuda", train_windows_of(windows), 1, cap)
    assert batch < per_rank_batch("cuda", train_windows_of(windows), 1) == 16384
    expected = throughput.throughput(t4, 1, 100, H100_ROWS, batch=batch).windows_per_s
    assert (
        row.windows_per_s == pytest.approx(expected) and f"batch {batch}" in row.throughput_detail
    )


def test_the_formulation_fastest_at_the_batch_is_the_one_planned():
    # As the trainer times its formulations and takes the fastest: here torch at a small
    # batch, nhwc (more fixed cost, less a window) at a large one.
    torch_cost, nhwc_cost = StepCost(1e-3, 2.4e-6), StepCost(3e-3, 1.2e-6)
    rows = [
        _row("NVIDIA H100 80GB HBM3", batch, cost, step=f"graph {name}")
        for name, cost in (("torch", torch_cost), ("nhwc", nhwc_cost))
        for batch in (1024, 4096)
    ]
    assert throughput.measured_cost(rows, 256).step == "graph torch"
    assert throughput.measured_cost(rows, 4096).step == "graph nhwc"


def test_the_repositorys_h100_rows_hold_both_steps_and_each_fits():
    rows = throughput.load_measured()
    h100 = [r for r in rows if throughput.gpu_matches(r.gpu, "H100 80GB")]
    for kind in ("graph", "eager"):
        of_kind = [r for r in h100 if r.step.startswith(kind)]
        assert {r.batch_size for r in of_kind} >= {1024, 4096}
    assert throughput.fit_step_model(rows, 100) is not None
    assert throughput.fitted_host_s(rows, 100) is not None


class _Cuda:
    """What `settle` reads of a torch.device: its type (a GPU's, without torch here)."""

    type = "cuda"


M1 = 600_000
P5 = VmSize("test.p5", "aws", "H100 80GB", 8, 80, 192, 2048, 55.0, None, "us-east-1",
            ("us-east-1",), gpu_link="NVLink 4")  # fmt: skip


def test_a_box_of_eight_takes_the_global_batch_one_gpu_takes_each_gpu_a_share():
    row = plan.make_plan(plan.PlanRequest(windows=M1, epochs=1), (P5,), measured=H100_ROWS).rows[0]
    assert (row.global_batch, row.per_gpu_batch, row.batch_departs) == (1024, 128, "")
    per_gpu = TRUE_COST.windows_per_s(128)
    all_reduce = scaling.ddp_scaling(per_gpu, 128, 8, "NVLink 4")
    assert row.windows_per_s == pytest.approx(8 * per_gpu * all_reduce.efficiency)


def test_a_box_whose_gpus_steps_are_mostly_fixed_cost_says_how_little_it_buys():
    # The repository's H100 rows: at M1 a GPU's 128 windows are ~7% of its step.
    request = plan.PlanRequest(windows=M1, epochs=1)
    built = plan.make_plan(request, (P5,), measured=throughput.load_measured())
    row = built.rows[0]
    assert row.fixed_fraction > 0.9 and row.over_one_gpu == pytest.approx(1.4, abs=0.1)
    [said] = [note for note in built.notes if "mostly its fixed cost" in note]
    assert f"test.p5 {row.over_one_gpu:.1f}x (128 windows a GPU, {row.fixed_fraction:.0%}" in said


def test_a_row_whose_gpu_memory_lowers_the_global_batch_is_marked_departing():
    t4x4 = VmSize("test.t4.x4", "azure", "T4", 4, 16, 64, 440, 4.0, None, "eastus", ("eastus",),
                  gpu_link="PCIe 3.0")  # fmt: skip
    windows = 80_000_000  # the rule's 16384; a T4 holds 1024 beside 32 GB of data
    built = plan.make_plan(plan.PlanRequest(windows=windows, epochs=1), (t4x4,), measured=H100_ROWS)
    row = built.rows[0]
    assert (row.global_batch, row.per_gpu_batch) == (4096, 1024)
    assert row.batch_departs == "4096, not 16384 (1024 a GPU)"
    assert any("test.t4.x4 4096, not 16384" in note for note in built.notes)


def test_a_global_batch_beyond_the_one_measured_best_is_said_to_be_extrapolated():
    built = plan.make_plan(plan.PlanRequest(windows=M3, epochs=1), (P5,), measured=H100_ROWS)
    assert built.rows[0].global_batch == 4096
    assert any("a global batch of 4096" in note and "extrapolated" in note for note in built.notes)
