"""What ranks other than 0 hold in place of the run's writers.

With several ranks only rank 0 writes checkpoints, status.json, metrics.jsonl, TensorBoard
events and uploads. The other ranks run the same loop with these in place of
`RunOutputs` and `CheckpointManager`: the same calls, nothing read, and nothing
written but, on each other box, its local rank 0's `heartbeat.json`: the run's step
while it goes (the box's idle watchdog reads it: a box of workers is busy while the
step advances) and how the run ended (the box's launcher maps its exit code from it,
`trainer.loop.launcher`). What they need from a checkpoint, rank 0 broadcasts
(`trainer.loop.distributed.Group.broadcast_state`).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import torch

from box.contract import EXIT_STOPPED, HEARTBEAT_FILE, STATE_RUNNING
from trainer.atomic_write import write_json_atomic

HEARTBEAT_KEYS = ("step", "state", "exit_code")
# A write per half minute: the watchdog looks once a minute and calls a run hung
# after `hung_trainer_minutes` (120) without a step.
HEARTBEAT_SECONDS = 30.0


class Heartbeat:
    """`heartbeat.json` of a box whose rank 0 is elsewhere: {"step", "updated_at"}, and
    at the end "state" and "exit_code" as status.json says them (running|stopped|
    preempted|finished|failed). A `StatusWriter`'s `write`, keeping only those keys."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / HEARTBEAT_FILE
        self.fields: dict[str, Any] = {"step": None, "state": STATE_RUNNING, "exit_code": None}
        self._written_at = -HEARTBEAT_SECONDS

    def due(self, step: int) -> bool:
        return time.monotonic() - self._written_at >= HEARTBEAT_SECONDS

    def write(self, **changes: Any) -> None:
        self.fields.update({key: changes[key] for key in HEARTBEAT_KEYS if key in changes})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {**self.fields, "updated_at": time.time()})
        self._written_at = time.monotonic()


class QuietMeter:
    """`IntervalMeter`'s calls: rank 0 alone logs the interval's loss and windows/s."""

    def add(self, loss: torch.Tensor, windows: int, grad_norm: torch.Tensor | None = None) -> None:
        pass

    def due(self, step: int) -> bool:
        return False

    def excluded(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class QuietStatus:
    def write(self, **changes: Any) -> None:
        pass


class HeartbeatMeter(QuietMeter):
    """Due when the heartbeat is: the loop then calls `interval` with the step."""

    def __init__(self, heartbeat: Heartbeat) -> None:
        self._heartbeat = heartbeat

    def due(self, step: int) -> bool:
        return self._heartbeat.due(step)


class QuietOutputs:
    """`RunOutputs`'s calls, writing nothing but the `heartbeat`, if given."""

    def __init__(self, heartbeat: Heartbeat | None = None) -> None:
        self.heartbeat = heartbeat
        self.meter = QuietMeter() if heartbeat is None else HeartbeatMeter(heartbeat)
        self.status = QuietStatus() if heartbeat is None else heartbeat

    def interval(self, epoch: int, step: int, *args: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.write(step=step)

    def epoch_end(self, *args: Any) -> None:
        pass

    def stopped(self, reason: str | None, state: str, step: int, *args: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.write(state=state, step=step, exit_code=EXIT_STOPPED)

    def close(self) -> None:
        pass


class QuietCheckpoints:
    """`CheckpointManager`'s calls: never due, never saved, nothing to load locally."""

    last_saved_at: float | None = None
    store: None = None
    """Only rank 0 uploads."""

    def due(self, step: int) -> bool:
        return False  # only rank 0 saves

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
