"""`fab plan`'s eager step (the trainer's fallback): the host issues its kernels while the
GPU runs them, so a step takes the longer of the two; the GPU's work is the captured
step's, never a line through rows the host bound."""

from __future__ import annotations

import pytest

from ops.plan import scaling, throughput
from ops.plan.throughput import HostBoundCost, MeasuredThroughput, StepCost
from stack import catalog

H100 = catalog.GPUS["H100 80GB"]
A100 = catalog.GPUS["A100 80GB"]
CAPTURED = StepCost(fixed_s=2.5e-3, window_s=1.4e-6)
HOST_S = 18e-3  # the launches of one eager step, whatever its batch


def _row(batch: int, seconds: float, step: str = "eager nhwc") -> MeasuredThroughput:
    rate = batch / seconds
    return MeasuredThroughput(
        "2026-11-26", "NVIDIA H100 80GB HBM3", 1, "bf16", batch, 100, rate, None, "2.11", step
    )


CAPTURED_ROWS = tuple(
    _row(batch, CAPTURED.fixed_s + batch * CAPTURED.window_s, "graph nhwc")
    for batch in (1024, 4096)
)
# Both bound by the host: the GPU's 3.9 and 8.2 ms hide under its 18.
HOST_BOUND_ROWS = (_row(1024, HOST_S), _row(4096, HOST_S))


def _eager(batch: int, rows=CAPTURED_ROWS + HOST_BOUND_ROWS, gpu=H100, gpus=1, link=None):
    return throughput.throughput(gpu, gpus, 100, rows, link, batch, kind="eager")


@pytest.mark.parametrize("batch", [256, 1024, 2048, 8192])
def test_a_host_bound_eager_step_takes_the_hosts_time_while_the_gpu_finishes_sooner(batch):
    assert CAPTURED.fixed_s + batch * CAPTURED.window_s < HOST_S
    assert _eager(batch).windows_per_s == pytest.approx(batch / HOST_S)


def test_past_the_batch_where_the_gpu_binds_an_eager_step_takes_the_gpus_time():
    # The captured step at 16384: 2.5 ms + 22.9 ms, longer than the host's 18.
    assert _eager(16384).windows_per_s == pytest.approx(CAPTURED.windows_per_s(16384))


def test_an_eager_step_never_costs_a_window_less_than_the_captured_step():
    # The repository's H100 rows: a line through the eager nhwc rows (55 k at 1024, 212 k
    # at 4096) costs 0.2 us a window, a sixth of the captured 1.34 us.
    rows = throughput.load_measured()
    for batch in (2**power for power in range(8, 18)):
        eager = _eager(batch, rows).windows_per_s
        assert eager <= throughput.throughput(H100, 1, 100, rows, batch=batch).windows_per_s


def test_a_formulation_its_gpu_bound_at_a_batch_trains_no_faster_at_a_smaller_one():
    # Host-bound at 1024 (17 ms); at 4096 its own GPU work (33 ms), longer than the
    # captured step's: at 2048 it cannot beat 4096's rate, nor take less than 17 ms.
    cost = HostBoundCost(((1024, 17e-3), (4096, 33e-3)), "eager torch")
    assert cost.step_s(2048, gpu_s=5e-3) == pytest.approx(max(17e-3, 33e-3 * 2048 / 4096))
    assert cost.step_s(512, gpu_s=3e-3) == pytest.approx(17e-3)
    assert cost.step_s(8192, gpu_s=14e-3) == pytest.approx(33e-3)


def test_the_formulation_fastest_at_the_batch_is_the_eager_step_planned():
    # torch: fewer launches (16 ms), more GPU work (33 ms at 4096); nhwc: the host's 18 ms.
    torch_rows = (_row(1024, 16e-3, "eager torch"), _row(4096, 33e-3, "eager torch"))
    rows = CAPTURED_ROWS + HOST_BOUND_ROWS + torch_rows
    assert "eager torch" in _eager(2048, rows).detail
    assert _eager(2048, rows).windows_per_s == pytest.approx(2048 / (33e-3 * 2048 / 4096))
    assert "eager nhwc" in _eager(8192, rows).detail
    assert _eager(8192, rows).windows_per_s == pytest.approx(8192 / HOST_S)


def test_a_gpu_without_eager_rows_takes_the_host_time_of_the_gpus_measured():
    for batch in (1024, 16384):
        a100_captured = throughput.throughput(
            A100, 1, 100, CAPTURED_ROWS + HOST_BOUND_ROWS, batch=batch
        )
        a100 = _eager(batch, gpu=A100)
        assert a100.source == "modelled" and a100.step == "eager"
        expected_s = max(HOST_S, batch / a100_captured.windows_per_s)
        assert a100.windows_per_s == pytest.approx(batch / expected_s)


def test_with_no_eager_row_anywhere_the_eager_step_plans_as_the_captured_one_estimated():
    eager = _eager(1024, CAPTURED_ROWS)
    assert eager.windows_per_s == pytest.approx(CAPTURED.windows_per_s(1024))
    assert eager.source == "estimated" and "unmeasured" in eager.detail


def test_several_gpus_forced_eager_keep_the_share_the_all_reduce_leaves_their_eager_step():
    eight = _eager(1024, gpus=8, link="NVLink 4")
    per_gpu = 1024 / HOST_S
    all_reduce = scaling.ddp_scaling(per_gpu, 1024, 8, "NVLink 4")
    assert eight.step == "eager"
    assert eight.windows_per_s == pytest.approx(8 * per_gpu * all_reduce.efficiency)
