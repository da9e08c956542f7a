"""How much of one GPU's speed each GPU of a data-parallel run keeps: its step's compute
against the all-reduce of the gradients, inside a box and between boxes.

The trainer's captured step (every GPU count's default) all-reduces the gradients as one
flat bucket after the backward pass, inside its CUDA graph, and steps the optimizer
after it: the all-reduce is not hidden, each GPU keeps step / (step + all-reduce). DDP's
eager step (the fallback) all-reduces its buckets as the backward pass frees them, and
hides part of them behind it. `ops.plan.throughput` plans every multi-GPU box with it;
docs/distributed.md has the model and what it expects. Plain arithmetic: `fab plan`
must start without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ops.plan.workload import TRAIN_FLOPS_PER_FORWARD_FLOP
from stack.catalog import GPU_LINKS

# Every optimizer step, every rank all-reduces the fp32 gradients of all parameters
# (autocast computes in bf16/fp16, the gradients stay fp32).
MODEL_PARAMETERS = 7_218_753  # ResNet34-1D (trainer/model.py; tests/trainer/test_model.py)
GRADIENT_BYTES = MODEL_PARAMETERS * 4  # 28.9 MB
# The captured step all-reduces them as one flat bucket; DDP's eager step in buckets of
# its bucket_cap_mb default: 2 buckets.
DDP_BUCKET_BYTES = 25 * 2**20
EAGER_BUCKETS = -(-GRADIENT_BYTES // DDP_BUCKET_BYTES)
# Per GPU and direction, from the datasheets: NVLink 2/3/4 = 6/12/18 links x 25 GB/s
# (V100 SXM2 / A100 SXM4 / H100 SXM5), the H100 NVL pair's bridge 600 GB/s both ways,
# PCIe x16 gen 3/4 = 16/32 GB/s.
LINK_GB_S = {
    "PCIe 3.0": 16.0,
    "PCIe 4.0": 32.0,
    "NVLink 2": 150.0,
    "NVLink 3": 300.0,
    "NVLink 4 bridge": 300.0,
    "NVLink 4": 450.0,
}
assert set(LINK_GB_S) == set(GPU_LINKS)
# nccl-tests' all-reduce bus bandwidth reaches about this share of the link rate at
# message sizes like our 25 MB buckets; assumed alike for Ethernet between boxes
# (NCCL's socket transport on plain VPC/VNet networking, no EFA or InfiniBand).
LINK_EFFICIENCY = 0.75
# A ring all-reduce over P ranks on N boxes is 2(P-1) steps in sequence; as in NCCL's
# own tuning model, 2(P-N) of them pay a hop inside a box, 2(N-1) one across the network.
HOP_LATENCY_S = {"box": 5e-6, "network": 50e-6}
# DDP (the eager step) starts a bucket's all-reduce when its gradients are ready.
# Backward runs from the head: the last stage's gradients (3/4 of the parameters) are
# ready first, then stages 3..1 and the stem. We assume half the backward pass is left
# to hide the all-reduce behind; the optimizer step waits for all of it.
OVERLAPPED_BACKWARD_FRACTION = 0.5


@dataclass(frozen=True)
class DdpScaling:
    """One data-parallel step on `ranks` GPUs: compute against the gradients' all-reduce."""

    ranks: int
    step_s: float  # one rank's forward + backward + optimizer at its batch
    all_reduce_s: float  # the ring all-reduce of GRADIENT_BYTES over the slowest link
    exposed_s: float  # the part of it the backward pass does not hide
    link: str  # what the slowest link is

    @property
    def efficiency(self) -> float:
        """The share of per-GPU throughput each GPU keeps."""
        return self.step_s / (self.step_s + self.exposed_s)


def ddp_scaling(
    per_gpu_windows_per_s: float,
    per_rank_batch: int,
    gpus_per_box: int,
    gpu_link: str | None,
    boxes: int = 1,
    network_gbit_s: float | None = None,
    *,
    captured: bool,
) -> DdpScaling:
    """How a data-parallel step of `boxes` x `gpus_per_box` GPUs spends its time.

    A ring all-reduce moves 2(P-1)/P of the gradients through every rank's link; the
    ring is as fast as its slowest: the GPUs' link inside one box, the network
    (`network_gbit_s`, Gb/s) between boxes. The `captured` step all-reduces one flat
    bucket after the backward pass, inside its graph: nothing runs beside it. DDP's
    eager step starts each of its buckets as their gradients are ready.
    """
    ranks = gpus_per_box * boxes
    step_s = per_rank_batch / per_gpu_windows_per_s
    if ranks == 1:
        return DdpScaling(1, step_s, 0.0, 0.0, "none")
    if boxes > 1:
        if network_gbit_s is None:
            raise ValueError(f"{boxes} boxes: give the network's speed between them (Gb/s)")
        link, link_gb_s = f"{network_gbit_s:g} Gb/s network", network_gbit_s / 8
    elif gpu_link in LINK_GB_S:
        link, link_gb_s = gpu_link, LINK_GB_S[gpu_link]
    else:
        raise ValueError(f"{gpus_per_box} GPUs linked by {gpu_link!r}: expected one of {GPU_LINKS}")
    moved = 2 * (ranks - 1) / ranks * GRADIENT_BYTES
    hops_s = 2 * (ranks - boxes) * HOP_LATENCY_S["box"] + 2 * (boxes - 1) * HOP_LATENCY_S["network"]
    buckets = 1 if captured else EAGER_BUCKETS
    all_reduce_s = moved / (link_gb_s * 1e9 * LINK_EFFICIENCY) + buckets * hops_s
    return DdpScaling(ranks, step_s, all_reduce_s, _exposed_s(all_reduce_s, step_s, captured), link)


def _exposed_s(all_reduce_s: float, step_s: float, captured: bool) -> float:
    if captured:
        return all_reduce_s  # the optimizer waits for it, and the backward pass is done
    backward_s = step_s * (TRAIN_FLOPS_PER_FORWARD_FLOP - 1) / TRAIN_FLOPS_PER_FORWARD_FLOP
    return max(0.0, all_reduce_s - OVERLAPPED_BACKWARD_FRACTION * backward_s)


def ddp_assumptions() -> dict[str, Any]:
    """The scaling model's inputs, for `fab plan --json`."""
    return {
        "gradient_mb": GRADIENT_BYTES / 1e6,
        "link_gb_s": LINK_GB_S,
        "link_efficiency": LINK_EFFICIENCY,
        "hop_latency_us": {hop: seconds * 1e6 for hop, seconds in HOP_LATENCY_S.items()},
        "overlapped_backward_fraction": OVERLAPPED_BACKWARD_FRACTION,
        "buckets": {"captured": 1, "eager": EAGER_BUCKETS},
        "hidden_behind_backward": {"captured": False, "eager": True},
    }
