"""Run by test_ddp under torchrun (2 ranks, gloo): the all-reduced gradient on each rank
(`trainer.loop.gradient_sync`'s flat bucket) equals one process's gradient over the same
windows, for every model formulation.

Each rank forwards its part of a global batch as the trainer does (a sum over its
windows scaled to the global mean). The single-process reference accumulates the
same parts one after the other, so BatchNorm sees the same per-rank batches and the
two must agree to float rounding. Batches of 32, 5 and 1 windows: equal parts, a
short last batch, and a rank with no window at all. Exits 1 with a reason, else 0.
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.loop.distributed import Group, RankInfo
from trainer.loop.launcher import exit_process
from trainer.model import LAYERS, build_model

BATCHES = (32, 5, 1)
WINDOW_LENGTH = 64
RELATIVE_TOLERANCE = 1e-5


def gradients(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def check(formulation: str, group: Group, windows: int) -> str | None:
    config = ModelConfig(arch="resnet18", dropout=0.0)
    torch.manual_seed(0)
    model = build_model(config, "cpu", formulation)
    reference = build_model(config, "cpu", formulation)
    reference.load_state_dict(model.state_dict())
    bucket = group.gradients(model)
    generator = torch.Generator().manual_seed(windows)
    x = torch.randn(windows, 1, WINDOW_LENGTH, generator=generator)
    y = torch.randn(windows, generator=generator)
    parts = list(
        zip(x.tensor_split(group.world_size), y.tensor_split(group.world_size), strict=True)
    )

    mine_x, mine_y = parts[group.rank]
    loss = F.smooth_l1_loss(model(mine_x), mine_y, reduction="sum")
    (loss * group.world_size / windows).backward()
    bucket.all_reduce()
    for part_x, part_y in parts:
        part_loss = F.smooth_l1_loss(reference(part_x), part_y, reduction="sum")
        (part_loss / windows).backward()

    for name, got, want in zip(
        [n for n, _ in model.named_parameters()],
        gradients(model),
        gradients(reference),
        strict=True,
    ):
        error = (got - want).abs().max() / want.abs().max().clamp_min(1e-12)
        if error > RELATIVE_TOLERANCE:
            return f"{formulation}, batch {windows}: {name} differs by {float(error):.2e}"
        if got.stride() != want.stride():
            return f"{formulation}: {name}'s gradient strides {got.stride()} != {want.stride()}"
    return None


def main() -> int:
    group = Group.start(RankInfo.from_env())
    torch.set_num_threads(1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        problems = [check(f, group, n) for f in sorted(LAYERS) for n in BATCHES]
    problems += [str(w.message) for w in seen if "stride" in str(w.message)]
    group.close()
    for problem in filter(None, problems):
        print(f"rank {group.rank}: {problem}", file=sys.stderr)
        return 1
    print(f"rank {group.rank}: all-reduced gradients match for {sorted(LAYERS)}")
    return 0


if __name__ == "__main__":
    exit_process(main())  # as a trainer rank ends: torch's exit-time abort never ends it -6
