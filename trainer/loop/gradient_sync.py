"""The gradients' all-reduce of a data-parallel step: one flat bucket, inside the step.

Every parameter's gradient is a view into one flat fp32 tensor (with the parameter's
own strides: channels-last weights keep channels-last gradients). The backward pass
accumulates into those views; the step then divides the bucket by the world size and
all-reduces it (SUM) in one collective before the clip and AdamW. That is what DDP
computes with `gradient_as_bucket_view` (its reducer divides each bucket, then sums
it), so two ranks train bitwise DDP's weights (tests/trainer/dp_against_ddp.py).

Why not DDP: its all-reduces start from autograd hooks as buckets fill, outside any
CUDA graph, so a DDP step could not be captured and every GPU of a multi-GPU box ran
the eager step, bound by the host's ~850 kernel launches (a fifth of the captured
speed on an H100 at batch 1024). One collective after the backward pass is a plain
call on the step's stream: the whole step, all-reduce included, is one CUDA graph
(NCCL records collectives into graphs from 2.9.6). The price is overlap: the 28.9 MB
all-reduce is exposed instead of half hidden behind the backward pass. Inside a box
that is ~0.1 ms over NVLink and ~2-4 ms over PCIe against a 10-70 ms step at the
batches the trainer takes; across boxes on plain Ethernet it is more, and `fab plan`
counts it in full (`ops/plan/throughput.py`). Gradient accumulation needs no `no_sync`:
micro-batches that do not step only accumulate, and the stepping one all-reduces once.

Between boxes, at `--precision bf16`, the bucket travels in bf16 (`bf16`): half the
bytes over the network, where the all-reduce costs about as much as the step. It is
DDP's `bf16_compress_hook` step for step (cast, divide by the world size, sum, cast
back into the fp32 bucket), and trains that DDP's weights bitwise (tests/trainer/
dp_against_ddp.py). fp32 and fp16 runs, and every run inside one box (NVLink or PCIe:
the fp32 all-reduce is a few percent of a step at most), keep the fp32 all-reduce,
bitwise DDP's default.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class FlatGradients:
    """The gradients of `parameters` as views into one flat fp32 bucket, and its
    all-reduce over the default process group of `world_size` ranks (in bf16: `bf16`)."""

    def __init__(self, parameters: list[nn.Parameter], world_size: int, bf16: bool = False) -> None:
        device = parameters[0].device
        self.world_size, self.bf16 = world_size, bf16
        self.bucket = torch.zeros(sum(p.numel() for p in parameters), device=device)
        offset = 0
        # The last layers first, as DDP orders its buckets: their gradients are ready first.
        for parameter in reversed(parameters):
            if parameter.dtype != torch.float32:
                raise ValueError(f"a {parameter.dtype} parameter: the bucket holds fp32")
            view = self.bucket.as_strided(parameter.shape, parameter.stride(), offset)
            parameter.grad = view
            offset += parameter.numel()

    def all_reduce(self) -> None:
        """Every rank's gradient replaced by the mean over the ranks (no host sync)."""
        if self.bf16:
            compressed = self.bucket.to(torch.bfloat16).div_(self.world_size)
            dist.all_reduce(compressed)
            self.bucket.copy_(compressed)
            return
        self.bucket.div_(self.world_size)
        dist.all_reduce(self.bucket)


def broadcast_module(module: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank, as DDP does at its construction:
    the ranks start from the same weights whatever their seeds or checkpoints did."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            # NCCL sends dense tensors in their default layout only: nhwc's channels-last
            # weights go through a contiguous copy ("Tensors must be contiguous").
            sent = tensor if tensor.is_contiguous() else tensor.contiguous()
            dist.broadcast(sent, 0)
            if sent is not tensor:
                tensor.copy_(sent)
