"""ops.plan.scaling: the ring all-reduce of ResNet34-1D's fp32 gradients, one bucket after
the backward pass, against a step's compute, inside a box and between boxes."""

import pytest

from ops.plan import scaling, throughput
from ops.plan.scaling import GRADIENT_BYTES, ddp_scaling
from stack import catalog

# A100 at the estimate's 15% of bf16 peak: ~192k windows/s, 5.3 ms for 1024 windows.
A100_WINDOWS_PER_S = throughput.throughput(catalog.GPUS["A100 40GB"], 1, 100).windows_per_s


def test_the_gradients_are_7_2_m_fp32_parameters():
    assert GRADIENT_BYTES == 7_218_753 * 4  # 28.9 MB, whatever autocast computes in


def test_one_gpu_has_nothing_to_all_reduce():
    alone = ddp_scaling(A100_WINDOWS_PER_S, 1024, 1, None)
    assert (alone.all_reduce_s, alone.efficiency) == (0.0, 1.0)


def test_a_ring_moves_2_n_minus_1_over_n_of_the_gradients_over_the_slowest_link():
    nvlink = ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3")
    # 2 x 7/8 x 28.9 MB at 75% of 300 GB/s, plus 14 hops x 5 us.
    assert nvlink.all_reduce_s == pytest.approx(224.6e-6 + 70e-6, rel=1e-3)
    network = ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3", boxes=2, network_gbit_s=25)
    # 2 x 15/16 x 28.9 MB at 75% of 25 Gb/s; hops: 28 x 5 us inside the boxes, 2 x 50 us.
    assert network.all_reduce_s == pytest.approx(23.1e-3 + 240e-6, rel=1e-3)
    assert network.link == "25 Gb/s network"


def test_between_boxes_a_bf16_run_moves_half_the_bytes():
    fp32, bf16 = (
        ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3", 2, 100, precision)
        for precision in ("fp32", "bf16")
    )
    hops_s = 28 * 5e-6 + 2 * 50e-6
    assert bf16.all_reduce_s - hops_s == pytest.approx((fp32.all_reduce_s - hops_s) / 2, rel=1e-6)
    inside = [
        ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3", precision=p) for p in ("fp32", "bf16")
    ]
    assert inside[0] == inside[1]  # inside a box the bucket stays fp32


def test_nothing_hides_the_all_reduce_a_gpu_keeps_step_over_step_plus_all_reduce():
    nvlink = ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3")
    assert nvlink.efficiency == pytest.approx(nvlink.step_s / (nvlink.step_s + nvlink.all_reduce_s))
    assert nvlink.efficiency < 1.0


@pytest.mark.parametrize(
    ("gpus", "link", "boxes", "gbit_s", "efficiency"),
    [
        (8, "NVLink 3", 1, None, 0.95),  # 8x A100 NVLink: 0.29 ms against a 5.3 ms step
        (4, "PCIe 4.0", 1, None, 0.74),  # PCIe 4.0: 1.8 ms, a quarter of the step
        (8, "NVLink 3", 2, 100, 0.47),  # 2 boxes of 8 over 100 Gb/s: 7.5 GPUs' worth of 16
        (8, "NVLink 3", 2, 25, 0.19),  # over 25 Gb/s: 3.0 GPUs' worth, less than one box
        (1, "NVLink 3", 2, 100, 0.63),
        (1, "NVLink 3", 2, 25, 0.30),
    ],
)
def test_expected_efficiency_at_1024_windows_per_a100(gpus, link, boxes, gbit_s, efficiency):
    """The table of docs/distributed.md."""
    scaled = ddp_scaling(A100_WINDOWS_PER_S, 1024, gpus, link, boxes, gbit_s)
    assert scaled.efficiency == pytest.approx(efficiency, abs=0.01)


def test_efficiency_never_rises_with_more_boxes_or_a_slower_network():
    def efficiency(boxes: int, gbit_s: float) -> float:
        return ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3", boxes, gbit_s).efficiency

    for gbit_s in (10, 25, 50, 100):
        by_boxes = [efficiency(boxes, gbit_s) for boxes in (2, 4, 8, 16)]
        assert by_boxes == sorted(by_boxes, reverse=True)
    by_network = [efficiency(2, gbit_s) for gbit_s in (10, 25, 50, 100, 400)]
    assert by_network == sorted(by_network)


def test_efficiency_never_falls_with_a_larger_batch_or_a_faster_link():
    by_batch = [
        ddp_scaling(A100_WINDOWS_PER_S, batch, 4, "PCIe 3.0").efficiency
        for batch in (16, 64, 256, 1024)
    ]
    assert by_batch == sorted(by_batch) and by_batch[0] < 1.0
    by_link = [
        ddp_scaling(A100_WINDOWS_PER_S, 16, 4, link).efficiency
        for link in ("PCIe 3.0", "PCIe 4.0", "NVLink 2", "NVLink 3", "NVLink 4")
    ]
    assert by_link == sorted(by_link)


def test_a_faster_gpu_scales_worse_over_the_same_link():
    slow, fast = (ddp_scaling(rate, 1024, 2, "NVLink 3", 2, 25) for rate in (50_000, 500_000))
    assert fast.efficiency < slow.efficiency


def test_several_gpus_without_a_known_link_are_refused():
    with pytest.raises(ValueError, match="GPUs linked by None"):
        ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, None)
    with pytest.raises(ValueError, match="network's speed"):
        ddp_scaling(A100_WINDOWS_PER_S, 1024, 8, "NVLink 3", boxes=2)


def test_every_multi_gpu_size_in_the_catalog_names_a_link_the_model_knows():
    sizes = catalog.sizes(include_retired=True)
    for size in sizes:
        assert (size.gpu_link in scaling.LINK_GB_S) == (size.gpu_count > 1), size.name
    with pytest.raises(ValueError, match="gpu_link"):
        catalog.VmSize("x", "aws", "A10G", 4, 24, 48, 192, 5.0, None, "us-east-1", ("us-east-1",))
