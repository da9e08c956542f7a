"""How much of one GPU's speed each GPU of a data-parallel run keeps: its step's compute
against the all-reduce of the gradients, inside a box and between boxes.

The trainer's data-parallel step, captured (every GPU count's default) or eager (its
fallback), all-reduces the gradients as one flat bucket after the backward pass and
steps the optimizer after it (`trainer.loop.gradient_sync`): nothing hides the
all-reduce, so each GPU keeps step / (step + all-reduce). `ops.plan.throughput` plans
every multi-GPU box with it; docs/distributed.md has the model and what it expects.
Plain arithmetic: `fab plan` must start without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stack.catalog import GPU_LINKS

# Every optimizer step, every rank all-reduces the fp32 gradients of all parameters
# (autocast computes in bf16/fp16, the gradients stay fp32), in one flat bucket; between
# boxes at bf16 the bucket travels in bf16, half the bytes (`trainer.loop.gradient_sync`).
MODEL_PARAMETERS = 7_218_753  # ResNet34-1D (trainer/model.py; tests/trainer/test_model.py)
GRADIENT_BYTES = MODEL_PARAMETERS * 4  # 28.9 MB
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
# message sizes like our 28.9 MB bucket; assumed alike for Ethernet between boxes
# (NCCL's socket transport on plain VPC/VNet networking, no EFA or InfiniBand).
LINK_EFFICIENCY = 0.75
# A ring all-reduce over P ranks on N boxes is 2(P-1) steps in sequence; as in NCCL's
# own tuning model, 2(P-N) of them pay a hop inside a box, 2(N-1) one across the network.
HOP_LATENCY_S = {"box": 5e-6, "network": 50e-6}


@dataclass(frozen=True)
class DdpScaling:
    """One data-parallel step on `ranks` GPUs: compute against the gradients' all-reduce."""

    ranks: int
    step_s: float  # one rank's forward + backward + optimizer at its batch
    all_reduce_s: float  # the ring all-reduce of GRADIENT_BYTES over the slowest link
    link: str  # what the slowest link is

    @property
    def efficiency(self) -> float:
        """The share of per-GPU throughput each GPU keeps."""
        return self.step_s / (self.step_s + self.all_reduce_s)


def ddp_scaling(
    per_gpu_windows_per_s: float,
    per_rank_batch: int,
    gpus_per_box: int,
    gpu_link: str | None,
    boxes: int = 1,
    network_gbit_s: float | None = None,
    precision: str = "fp32",
) -> DdpScaling:
    """How a data-parallel step of `boxes` x `gpus_per_box` GPUs at `precision` spends
    its time.

    A ring all-reduce moves 2(P-1)/P of the gradients through every rank's link; the
    ring is as fast as its slowest: the GPUs' link inside one box, the network
    (`network_gbit_s`, Gb/s) between boxes. The step waits for all of it: the bucket
    is all-reduced after the backward pass, before the optimizer, nothing beside it.
    """
    ranks = gpus_per_box * boxes
    step_s = per_rank_batch / per_gpu_windows_per_s
    if ranks == 1:
        return DdpScaling(1, step_s, 0.0, "none")
    if boxes > 1:
        if network_gbit_s is None:
            raise ValueError(f"{boxes} boxes: give the network's speed between them (Gb/s)")
        link, link_gb_s = f"{network_gbit_s:g} Gb/s network", network_gbit_s / 8
    elif gpu_link in LINK_GB_S:
        link, link_gb_s = gpu_link, LINK_GB_S[gpu_link]
    else:
        raise ValueError(f"{gpus_per_box} GPUs linked by {gpu_link!r}: expected one of {GPU_LINKS}")
    bucket = GRADIENT_BYTES // 2 if boxes > 1 and precision == "bf16" else GRADIENT_BYTES
    moved = 2 * (ranks - 1) / ranks * bucket
    hops_s = 2 * (ranks - boxes) * HOP_LATENCY_S["box"] + 2 * (boxes - 1) * HOP_LATENCY_S["network"]
    all_reduce_s = moved / (link_gb_s * 1e9 * LINK_EFFICIENCY) + hops_s
    return DdpScaling(ranks, step_s, all_reduce_s, link)


def ddp_assumptions() -> dict[str, Any]:
    """The scaling model's inputs, for `fab plan --json`."""
    return {
        "gradient_mb": GRADIENT_BYTES / 1e6,
        "link_gb_s": LINK_GB_S,
        "link_efficiency": LINK_EFFICIENCY,
        "hop_latency_us": {hop: seconds * 1e6 for hop, seconds in HOP_LATENCY_S.items()},
        # None of the backward pass hides the all-reduce: it runs after it (until
        # 2026-11 DDP's eager step hid its buckets behind half of it).
        "overlapped_backward_fraction": 0.0,
        "buckets": 1,
    }
