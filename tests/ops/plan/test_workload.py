"""ops.plan.workload: what one training window of ResNet34-1D asks of a GPU, counted from
the architecture, and the most windows/s a GPU's datasheet allows for it."""

import pytest

from ops.plan import workload
from stack import catalog


def test_forward_flops_match_the_hand_count_of_resnet34_1d():
    # 40.6M multiply-accumulates at L=100: 81.3 MFLOP a window (docs/costs.md).
    assert workload.forward_flops_per_window(100) == 81_294_080


def test_flop_arithmetic_agrees_with_torch_flop_counter_on_the_real_model():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from trainer.config import ModelConfig
    from trainer.model import build_model

    model = build_model(ModelConfig(arch="resnet34"))
    for length in (100, 256):
        x = torch.randn(2, 1, length)
        with FlopCounterMode(display=False) as forward:
            model(x)
        with FlopCounterMode(display=False) as train:
            model(x).sum().backward()
        assert forward.get_total_flops() / 2 == workload.forward_flops_per_window(length)
        # The input needs no gradient, so torch counts slightly less than 3x forward.
        assert train.get_total_flops() / 2 == pytest.approx(
            workload.train_flops_per_window(length), rel=1e-3
        )


def test_the_roofline_is_the_slower_of_a_windows_compute_and_its_memory_traffic():
    flops, traffic = workload.train_flops_per_window(100), workload.train_bytes_per_window(100)
    h100, t4 = catalog.GPUS["H100 80GB"], catalog.GPUS["T4"]
    # H100: 0.25 us of bf16 compute, 0.58 us of traffic; T4: 3.8 us of fp16, 6.1 us.
    for memory_bound in (h100, t4):
        bandwidth = memory_bound.memory_tb_s * 1e12
        assert workload.roofline_windows_per_s(memory_bound, 100) == pytest.approx(
            bandwidth / traffic
        )
    a_compute_bound_gpu = catalog.GpuSpec("slow", 16, 1.0, 1.0, 1.0, "8.0", 100.0)
    assert workload.roofline_windows_per_s(a_compute_bound_gpu, 100) == pytest.approx(1e12 / flops)
