"""What ranks other than 0 hold in place of the run's writers.

Under DDP only rank 0 writes checkpoints, status.json, metrics.jsonl, TensorBoard
events and uploads (on a multi-box run the other boxes' run dirs stay empty). The
other ranks run the same loop with these in place of `RunOutputs` and
`CheckpointManager`: the same calls, nothing written, nothing read. What they need
from a checkpoint, rank 0 broadcasts (`trainer.distributed.Group.broadcast_state`).
"""

from __future__ import annotations

from typing import Any

import torch


class QuietMeter:
    """`IntervalMeter`'s calls: rank 0 alone logs the interval's loss and windows/s."""

    def add(self, loss: torch.Tensor, windows: int) -> None:
        pass

    def due(self, step: int) -> bool:
        return False


class QuietStatus:
    def write(self, **changes: Any) -> None:
        pass


class QuietOutputs:
    """`RunOutputs`'s calls, writing nothing."""

    def __init__(self) -> None:
        self.meter = QuietMeter()
        self.status = QuietStatus()

    def interval(self, *args: Any) -> None:
        pass

    def epoch_end(self, *args: Any) -> None:
        pass

    def stopped(self, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass


class QuietCheckpoints:
    """`CheckpointManager`'s calls: never due, never saved, nothing to load locally."""

    last_saved_at: float | None = None

    def due(self, step: int) -> bool:
        return False  # rank 0's policy decides, through the stop/save vote

    def save_last(self, state: dict[str, Any]) -> None:
        pass

    def save_best(self, state: dict[str, Any]) -> None:
        pass

    def load_latest(self, check: Any = None) -> None:
        return None

    def load_best(self) -> None:
        return None

    def uploads(self) -> None:
        return None

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self, timeout_s: float) -> bool:
        return True
