"""Every rank captures, or none: a capture (or a compile) that fails on one rank of two
gloo ranks leaves both stepping eagerly, said in one line, with the same weights.

On the CPU there is no CUDA graph: the seam is the capture's recording (`record`), which
fails on rank 1 here and records for a replay on the CPU (`tests.trainer.eager_graph`)
on rank 0. Before this agreement rank 0 replayed its graph (on a GPU an all-reduce
inside it) while rank 1 all-reduced eagerly: NCCL needs the same collectives on every
rank, and that hangs or corrupts.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from tests.trainer.eager_graph import CAPTURE_ERROR, fail_to_record, record_eagerly
from tests.trainer.gloo_ranks import run_ranks
from trainer.config import ModelConfig
from trainer.loop.device import DeviceChoice
from trainer.loop.distributed import Group
from trainer.loop.step import WARMUP_STEPS, TrainStep
from trainer.model import build_model

CPU = DeviceChoice(torch.device("cpu"), "fp32", "CPU")
GLOBAL_BATCH, LENGTH, STEPS = 8, 64, WARMUP_STEPS + 3


class _CompileFails(nn.Module):
    """What torch.compile's wrapper does when inductor fails on this rank alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("inductor: compilation failed on this rank")


def _train(group: Group, fails: str) -> dict:
    """STEPS steps of two ranks where rank 1's `fails` ("capture" or "compile")."""
    torch.manual_seed(0)
    model = build_model(ModelConfig("resnet18"), CPU.device, "gemm").train()
    broken = group.rank == 1
    record = fail_to_record if broken and fails == "capture" else record_eagerly
    trained: nn.Module = _CompileFails() if broken and fails == "compile" else nn.Sequential(model)
    lines: list[str] = []
    step = TrainStep(
        trained, list(model.parameters()), CPU.optimizer(model.parameters(), 1e-3, 1e-2), None,
        CPU, 1.0, True, lines.append, uncompiled=model, gradients=group.gradients(model),
        record=record, agree=group.first_failure,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    for index in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 1, LENGTH, generator=generator)
        y = torch.randn(GLOBAL_BATCH, generator=generator)
        x, y = (part.tensor_split(group.world_size)[group.rank] for part in (x, y))
        torch.manual_seed(index * 1_000 + group.rank)
        step(x, y, group.world_size / GLOBAL_BATCH)
    return {
        "lines": lines,
        "captured": step.captured,
        "uncompiled": step.trained is model,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
    }


def test_a_capture_failing_on_one_rank_leaves_every_rank_eager_saying_so_once(tmp_path):
    ranks = run_ranks(functools.partial(_train, fails="capture"), 2, tmp_path)
    assert [rank["captured"] for rank in ranks] == [False, False]
    said = (
        "graph: capture failed on rank 1 (every rank alike), eager steps "
        f"(RuntimeError: {CAPTURE_ERROR})"
    )
    # Every rank says the one line, rank 1's error in it; the trainer prints rank 0's.
    assert [rank["lines"] for rank in ranks] == [[said], [said]]
    first, second = (rank["weights"] for rank in ranks)
    assert all(torch.equal(first[key], second[key]) for key in first if "running" not in key)


def test_a_compile_failing_on_one_rank_leaves_every_rank_uncompiled(tmp_path):
    ranks = run_ranks(functools.partial(_train, fails="compile"), 2, tmp_path)
    assert [rank["uncompiled"] for rank in ranks] == [True, True]
    said = "compile: failed on rank 1 (every rank alike), eager steps (RuntimeError: inductor: "
    assert all(len(rank["lines"]) == 1 and rank["lines"][0].startswith(said) for rank in ranks)
    # and the captures that followed were every rank's
    assert [rank["captured"] for rank in ranks] == [True, True]
