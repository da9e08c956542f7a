"""The CPU's stand-in for a CUDA graph, for what a CPU can prove of the captured step:
the static buffers, one graph for each shape of work (accumulate-only, stepping), the
ranks' agreement on a capture. As a capture does, recording runs nothing; a replay
runs the recorded work on the buffers and writes its result where the recording said."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"


class EagerGraph:
    def __init__(self, work: Callable[[], torch.Tensor]) -> None:
        self.work, self.out = work, torch.zeros(())
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        self.out.copy_(self.work())

    def pool(self) -> None:
        return None


def record_eagerly(work: Callable[[], torch.Tensor], pool: Any) -> tuple[EagerGraph, torch.Tensor]:
    graph = EagerGraph(work)
    return graph, graph.out


def fail_to_record(work: Callable[[], torch.Tensor], pool: Any) -> tuple[EagerGraph, torch.Tensor]:
    raise RuntimeError(CAPTURE_ERROR)
