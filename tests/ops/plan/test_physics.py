"""No plan promises what physics forbids. Over the whole catalog at the seeds' dataset
sizes, with the repository's measured rows and with none, on either step: a box of N
GPUs plans no more than N of its GPU's one-GPU rows, and no box more than N times its
GPU's datasheet roofline."""

from __future__ import annotations

import pytest

from ops.plan import throughput, workload
from ops.plan.estimate import MILESTONE_WINDOWS, PlanRequest, PlanRow, make_plan
from stack import catalog
from stack.catalog import VmSize

MEASURED = {"repository rows": throughput.load_measured(), "no rows": ()}
# The captured step is the default (no flag); the eager one, `fab plan --no-graph`.
STEPS = {"captured": {}, "eager": {"graph": False}}
CASES = [
    pytest.param(windows, rows, step, id=f"{milestone}-{rows}-{step}")
    for milestone, windows in MILESTONE_WINDOWS.items()
    for rows in MEASURED
    for step in STEPS
]
SIZES = {size.name: size for size in catalog.sizes(include_retired=True)}


def _one_gpu_sizes() -> tuple[VmSize, ...]:
    """A one-GPU size of every GPU model of the catalog (some are sold only several to a
    box: p5's H100 80GB, p4d's A100 40GB)."""
    where = ("us-east-1", ("us-east-1",))
    return tuple(
        VmSize(f"one {model}", "aws", model, 1, spec.memory_gib, 8, 64, 1.0, None, *where)
        for model, spec in catalog.GPUS.items()
    )


def _rows(windows: int, rows: str, step: str) -> tuple[PlanRow, ...]:
    request = PlanRequest(windows=windows, epochs=100, **STEPS[step])
    sizes = (*SIZES.values(), *_one_gpu_sizes())
    return make_plan(request, sizes, measured=MEASURED[rows]).rows


def _gpu(row: PlanRow) -> catalog.GpuSpec:
    return catalog.GPUS[row.gpu.split("x ", 1)[1]]


def _roofline_windows_per_s(gpu: catalog.GpuSpec, precision: str) -> float:
    """A window's FLOPs at the datasheet peak of `precision`, or its memory traffic at
    the datasheet bandwidth, whichever takes longer."""
    peak = gpu.bf16_tflops if precision == "bf16" else gpu.fp16_tflops
    compute_s = workload.train_flops_per_window(100) / (peak * 1e12)
    memory_s = workload.train_bytes_per_window(100) / (gpu.memory_tb_s * 1e12)
    return 1 / max(compute_s, memory_s)


@pytest.mark.parametrize(("windows", "rows", "step"), CASES)
def test_no_box_of_n_gpus_plans_more_than_n_of_its_gpus_one_gpu_rows(windows, rows, step):
    planned = _rows(windows, rows, step)
    one_gpu = {_gpu(row).model: row.windows_per_s for row in planned if row.gpu_count == 1}
    beyond = [
        f"{row.size} ({row.gpu}): {row.windows_per_s:,.0f} windows/s, "
        f"{row.windows_per_s / (row.gpu_count * one_gpu[_gpu(row).model]):.2f} x N one-GPU rows"
        for row in planned
        if row.windows_per_s > row.gpu_count * one_gpu[_gpu(row).model] * (1 + 1e-9)
    ]
    assert beyond == []


@pytest.mark.parametrize(("windows", "rows", "step"), CASES)
def test_no_box_plans_above_n_times_its_gpus_datasheet_roofline(windows, rows, step):
    beyond = [
        f"{row.size} ({row.gpu}): {row.windows_per_s:,.0f} windows/s"
        for row in _rows(windows, rows, step)
        if row.windows_per_s
        > row.gpu_count * _roofline_windows_per_s(_gpu(row), row.precision) * (1 + 1e-9)
    ]
    assert beyond == []


def test_a_row_above_the_roofline_is_capped_and_says_so():
    t4 = catalog.GPUS["T4"]
    too_fast = throughput.MeasuredThroughput(
        "2026-11-26", "Tesla T4", 1, "fp16", 1024, 100, 10e6, None, "2.11", "graph nhwc"
    )
    planned = throughput.throughput(t4, 1, 100, (too_fast,), batch=1024)
    assert planned.windows_per_s == pytest.approx(_roofline_windows_per_s(t4, "fp16"))
    assert "capped" in planned.detail and "roofline" in planned.detail
