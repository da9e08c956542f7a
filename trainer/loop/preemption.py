"""Stop requests: SIGTERM/SIGINT (docker stop, Ctrl-C) and spot eviction notices.

The signal handler and the notice pollers (`trainer.loop.spot_notice`, background
threads) only set an Event; the training loop reads `StopSignal.requested` after
every optimizer step (a Python attribute read, no device sync), then finishes the
step, writes a checkpoint, uploads it synchronously within `upload_seconds_left()`,
acknowledges the notice (Azure lets the eviction go ahead early) and exits 75 so the
box's resume unit (box/resume.py, the only thing that restarts a run;
docker's own policy is `no`) brings the run back.

With several ranks a signal or a notice reaches one rank, or some: each rank casts `code` in
the loop's stop vote (`StopVote`, through `trainer.loop.distributed.Group.agree`), and every
rank `adopt`s the agreed code, so all stop at the same step. The vote is taken every
`VOTE_EVERY_STEPS` steps or every `VOTE_EVERY_SECONDS`, whichever is later, not every
step: across boxes its all-reduce goes over the same interface as NCCL's sockets, and its
latency could exceed a 3.6 ms step. A stop is then acted on within about two votes' time
(~1 s), well inside a spot notice's 30 s. Only one rank per box (local rank 0) polls the
metadata service.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from box.contract import STATE_PREEMPTED, STATE_STOPPED
from trainer.loop.spot_notice import Notice, NoticeWatcher

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What a rank casts in the stop vote; the group takes the largest.
STOP_CODES = {STATE_STOPPED: 1, STATE_PREEMPTED: 2}
# From the request to the end of the upload. Azure gives a Preempt >= 30 s; the
# container's stop timeout is 120 s (ARCHITECTURE.md) and AWS gives 2 minutes.
AZURE_PREEMPT_BUDGET_SECONDS = 25.0
STOP_BUDGET_SECONDS = 100.0
MIN_UPLOAD_SECONDS = 5.0
VOTE_EVERY_STEPS = 4
VOTE_EVERY_SECONDS = 0.5


class StopSignal:
    """Install with `install()`; ask with `requested`; `reason` says what asked."""

    def __init__(self, watch_notices: bool = True) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.state = STATE_STOPPED  # status.json state to report: stopped or preempted
        self.requested_at: float | None = None
        self.budget_s = STOP_BUDGET_SECONDS
        self._previous: dict[int, object] = {}
        self._watcher = NoticeWatcher(self._on_notice) if watch_notices else None

    def install(self) -> StopSignal:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        if self._watcher is not None:
            self._watcher.start()
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._watcher is not None:
            self._watcher.stop()

    def request(
        self, reason: str, state: str = STATE_STOPPED, budget_s: float | None = None
    ) -> None:
        """Ask the loop to stop; signal handlers call this, spot-notice pollers with "preempted"."""
        if self.reason is None:
            self.reason, self.state = reason, state
            self.requested_at = time.monotonic()
            self.budget_s = budget_s or STOP_BUDGET_SECONDS
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    @property
    def code(self) -> int:
        """0 while nothing asked; else this rank's STOP_CODES entry, for the vote."""
        return STOP_CODES[self.state] if self.requested else 0

    def adopt(self, code: int) -> None:
        """Take the group's agreed stop code: another rank may have been asked."""
        if code and not self.requested:
            state = next(name for name, value in STOP_CODES.items() if value == code)
            asked = "a spot notice" if state == STATE_PREEMPTED else "a stop request"
            self.request(f"{asked} on another rank", state)

    def upload_seconds_left(self) -> float:
        """How long the final upload may take before the machine is gone."""
        if self.requested_at is None:
            return self.budget_s
        left = self.requested_at + self.budget_s - time.monotonic()
        return max(MIN_UPLOAD_SECONDS, left)

    def acknowledge(self) -> None:
        """After the upload: tell the platform it may go ahead (Azure Scheduled Events)."""
        if self._watcher is not None:
            self._watcher.acknowledge()

    def _on_notice(self, notice: Notice) -> None:
        budget = AZURE_PREEMPT_BUDGET_SECONDS if notice.cloud == "azure" else STOP_BUDGET_SECONDS
        self.request(f"{notice.cloud} {notice.detail}", STATE_PREEMPTED, budget)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)


class Voters(Protocol):
    """The ranks that vote (`trainer.loop.distributed.Group`)."""

    @property
    def world_size(self) -> int: ...

    def agree(self, *values: int) -> tuple[int, ...]: ...


class StopVote:
    """When the ranks vote on stopping, and what they agreed.

    Called after every optimizer step with this rank's `StopSignal.code`; answers the
    code every rank acts on at that step (0: go on). Alone, that is the rank's own code,
    every step (an Event read). With several ranks, a vote is cast only at agreed steps:
    each vote carries, beside the codes, how many steps each rank measured in
    `every_s` since the vote before, and the next vote comes `every_steps` steps or that
    many steps later, whichever is later: all ranks compute the same next step from the
    same agreed answer (`Group.agree` answers the previous vote's, so no rank waits on
    the all-reduce it just started).
    """

    def __init__(
        self,
        voters: Voters,
        every_steps: int = VOTE_EVERY_STEPS,
        every_s: float = VOTE_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.voters, self.every_steps, self.every_s, self.clock = (
            voters,
            every_steps,
            every_s,
            clock,
        )
        self.next_step: int | None = None  # None: the first step after a start votes
        self._last: tuple[int, float] | None = None  # the step and time of the last vote

    def __call__(self, step: int, code: int) -> int:
        """The stop code every rank acts on after optimizer step `step`."""
        if self.voters.world_size == 1:
            return code
        if self.next_step is not None and step < self.next_step:
            return 0
        now = self.clock()
        agreed, steps_in_time = self.voters.agree(code, self._steps_in_time(step, now))
        self.next_step = step + max(self.every_steps, steps_in_time)
        self._last = (step, now)
        return agreed

    def _steps_in_time(self, step: int, now: float) -> int:
        """How many steps this rank took in `every_s`, as measured since the last vote
        (0 before one)."""
        if self._last is None:
            return 0
        last_step, last_at = self._last
        seconds_a_step = max(now - last_at, 1e-9) / (step - last_step)
        return math.ceil(self.every_s / seconds_a_step)
