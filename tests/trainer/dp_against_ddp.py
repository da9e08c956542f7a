"""Run under torchrun by the data-parallel tests: the trainer's data-parallel step (the
gradients in one flat bucket, all-reduced inside the step: `trainer.loop.gradient_sync`)
trains bitwise the weights that DDP's step trains (`DistributedDataParallel` with
`gradient_as_bucket_view`, the trainer's step before it), from the same weights on the
same batches, with and without gradient accumulation; and with the bucket all-reduced
in bf16 (between boxes at bf16), the weights DDP trains with its `bf16_compress_hook`.

On the CPU: two ranks over gloo, both steps eager. On a GPU (one rank, NCCL, under
--deterministic kernels): the new step captured as one CUDA graph, all-reduce inside,
against DDP's eager step. Exits 1 naming the first tensor that differs, else 0.
"""

from __future__ import annotations

import contextlib
import inspect
import sys

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from trainer.config import ModelConfig
from trainer.loop.device import DeviceChoice, use_deterministic_kernels
from trainer.loop.distributed import Group, RankInfo
from trainer.loop.step import TrainStep
from trainer.model import build_model

STEPS = 6
GLOBAL_BATCH = 16
WINDOW_LENGTH = 64


def ddp(model: torch.nn.Module) -> DistributedDataParallel:
    """DDP as the trainer built it: gradients as bucket views, no buffer broadcast at
    every forward (`forward_sync_buffers` from torch 2.13, `broadcast_buffers` before)."""
    parameters = inspect.signature(DistributedDataParallel).parameters
    name = "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"
    return DistributedDataParallel(model, gradient_as_bucket_view=True, **{name: False})


def bf16_compress(state, bucket):
    """DDP's `bf16_compress_hook`, which DDP registers only for NCCL (a check of its
    name): its own body, for gloo too."""
    return default_hooks._compress_hook(torch.bfloat16, state, bucket)


def train(
    group: Group, choice: DeviceChoice, through: str, accum: int, bf16: bool = False
) -> dict[str, torch.Tensor]:
    """The weights and buffers after STEPS optimizer steps `through` "bucket" or "ddp",
    the gradients all-reduced in bf16 where `bf16`."""
    torch.manual_seed(0)
    formulation = "nhwc" if choice.device.type == "cuda" else "gemm"
    model = build_model(ModelConfig("resnet18"), choice.device, formulation).train()
    trained = ddp(model) if through == "ddp" else model
    if through == "ddp" and bf16:
        trained.register_comm_hook(None, bf16_compress)
    gradients = group.gradients(model) if through == "bucket" else None
    if gradients is not None:
        gradients.bf16 = bf16
    optimizer = choice.optimizer(model.parameters(), 1e-3, 1e-2)
    capture = through == "bucket" and choice.device.type == "cuda" and accum == 1
    step = TrainStep(
        trained, list(model.parameters()), optimizer, None, choice, 1.0, capture,
        gradients=gradients,
    )  # fmt: skip
    for micro in range(STEPS * accum):
        generator = torch.Generator().manual_seed(micro)
        x = torch.randn(GLOBAL_BATCH, 1, WINDOW_LENGTH, generator=generator)
        y = torch.randn(GLOBAL_BATCH, generator=generator)
        x, y = (part.tensor_split(group.world_size)[group.rank] for part in (x, y))
        steps = (micro + 1) % accum == 0
        skip_all_reduce = through == "ddp" and not steps
        torch.manual_seed(micro * 1_000 + group.rank)  # dropout, as the loop seeds it
        with trained.no_sync() if skip_all_reduce else contextlib.nullcontext():
            step(
                x.to(choice.device), y.to(choice.device),
                group.world_size / (GLOBAL_BATCH * accum), steps=steps,
            )  # fmt: skip
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def first_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str | None:
    for key in a:
        if not torch.equal(a[key], b[key]):
            gap = (a[key].double() - b[key].double()).abs().max()
            return f"{key} differs (max {float(gap):.3g})"
    return None


def main() -> int:
    group = Group.start(RankInfo.from_env())
    if torch.cuda.is_available():
        use_deterministic_kernels()
        device = torch.device("cuda", torch.cuda.current_device())
        choice = DeviceChoice(device, "bf16", "GPU")
    else:
        torch.set_num_threads(1)
        choice = DeviceChoice(torch.device("cpu"), "fp32", "CPU")
    problems, trained = [], {}
    for accum, bf16 in ((1, False), (2, False), (1, True), (2, True)):
        bucket = trained[accum, bf16] = train(group, choice, "bucket", accum, bf16)
        reference = train(group, choice, "ddp", accum, bf16)
        difference = first_difference(bucket, reference)
        if difference:
            problems.append(
                f"grad-accum {accum}{', bf16 all-reduce' if bf16 else ''}: {difference}"
            )
    if first_difference(trained[1, True], trained[1, False]) is None:
        problems.append("the bf16 all-reduce trained the fp32 one's weights: it did not run")
    group.close()
    for problem in problems:
        print(f"rank {group.rank}: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"rank {group.rank}: the bucket step trains DDP's weights bitwise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
