"""A deadline on every training step's end, kept by a thread the step cannot block.

A captured step's collectives are replayed inside its CUDA graph, where PyTorch's NCCL
watchdog does not see them: a peer that hangs without dying (an Xid, an NVLink error)
leaves every other rank's GPU waiting in the all-reduce, and their hosts blocked in a
graph launch once the launch queue fills. Neither NCCL's timeout nor the stop vote
fires then; only the box's hung-run guard would end it, minutes of every GPU later. So
the loop tells this thread when each step begins and when the host has queued it, with
a marker of its end on the device (`done`: a CUDA event's query on a GPU; the step has
ended on the CPU), and the thread ends the process when a step has not ended by its
deadline: `DEADLINE_FACTOR` times the median of the recent steps, at least
`MIN_DEADLINE_SECONDS` (rank 0 writing a checkpoint holds the other ranks in their
next step's all-reduce for that long; an epoch's short last batch, eager, may compile
or autotune a new shape: at least `SHORT_BATCH_DEADLINE_SECONDS`). It says which step
hung and exits `EXIT_FAILED`: torchrun restarts the ranks, which resume from the last
checkpoint, and when its restarts run out the box records a failure
(`trainer.loop.launcher`, box/resume.py).

The deadline holds from the `ARMED_AFTER_STEPS`-th step of a process on: the first
steps compile, autotune, warm up and capture, and take what they take. Torch-free.
"""

from __future__ import annotations

import collections
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from box.contract import EXIT_FAILED

MIN_DEADLINE_SECONDS = 60.0
DEADLINE_FACTOR = 20
SHORT_BATCH_DEADLINE_SECONDS = 600.0
ARMED_AFTER_STEPS = 10
RECENT_STEPS = 50  # how many steps "the recent steps" are (an epoch's validation is one)
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class _Pending:
    """A step the host has begun or queued, not yet seen ended."""

    step: int
    since: float
    floor_s: float
    done: Callable[[], bool] | None = None  # None: the host is still in it


class StepDeadline:
    """Watch the loop's steps from a thread: `begin(step)` before the host runs or
    queues a step, `end(step, done)` after. Start with `start()`, end with `stop()`."""

    def __init__(
        self,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
        *,
        min_deadline_s: float = MIN_DEADLINE_SECONDS,
        armed_after: int = ARMED_AFTER_STEPS,
        poll_s: float = POLL_SECONDS,
        leave: Callable[[int], None] = os._exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.say, self.min_deadline_s, self.armed_after = say, min_deadline_s, armed_after
        self.poll_s, self.leave, self.clock = poll_s, leave, clock
        self._lock = threading.Lock()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._intervals: collections.deque[float] = collections.deque(maxlen=RECENT_STEPS)
        self._last_begun: float | None = None
        self._first_step: int | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-deadline", daemon=True)

    def start(self) -> StepDeadline:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def begin(self, step: int, full: bool = True) -> None:
        """The host starts optimizer step `step`'s work (a full batch, or an epoch's
        short last one, which has a longer deadline)."""
        now = self.clock()
        with self._lock:
            if self._first_step is None:
                self._first_step = step
            if self._last_begun is not None:
                self._intervals.append(now - self._last_begun)
            self._last_begun = now
            floor = (
                self.min_deadline_s
                if full
                else max(self.min_deadline_s, SHORT_BATCH_DEADLINE_SECONDS)
            )
            self._pending.append(_Pending(step, now, floor))

    def end(self, step: int, done: Callable[[], bool]) -> None:
        """The host has queued step `step`'s work; `done()` says when the device ended it."""
        with self._lock:
            if self._pending and self._pending[-1].step == step and self._pending[-1].done is None:
                begun = self._pending.pop()
                self._pending.append(_Pending(step, begun.since, begun.floor_s, done))

    def deadline_s(self, floor_s: float) -> float:
        """How long a step may take: `DEADLINE_FACTOR` times the median of the recent
        ones (from one step's start to the next's), at least `floor_s`."""
        typical = statistics.median(self._intervals) if self._intervals else 0.0
        return max(floor_s, DEADLINE_FACTOR * typical)

    def overdue(self) -> tuple[_Pending, float, float] | None:
        """The oldest step past its deadline, how long it has taken and its deadline;
        None while every step is in time (or the deadline is not armed yet)."""
        now = self.clock()
        with self._lock:
            while self._pending and self._pending[0].done is not None and self._pending[0].done():
                self._pending.popleft()
            if not self._pending or self._first_step is None:
                return None
            oldest = self._pending[0]
            if oldest.step < self._first_step + self.armed_after:
                return None
            deadline = self.deadline_s(oldest.floor_s)
            taken = now - oldest.since
            return (oldest, taken, deadline) if taken > deadline else None

    def _watch(self) -> None:
        while not self._stopped.wait(self.poll_s):
            late = self.overdue()
            if late is None:
                continue
            pending, taken, deadline = late
            where = "in the host's launch" if pending.done is None else "on the device"
            rank = os.environ.get("RANK", "0")
            self.say(
                f"watchdog: step {pending.step} has not ended after {taken:.0f} s {where} "
                f"(rank {rank}; deadline {deadline:.0f} s: {DEADLINE_FACTOR}x the recent "
                f"steps' median, at least {pending.floor_s:.0f} s): a peer or this GPU hangs; "
                f"exiting {EXIT_FAILED} so torchrun restarts the ranks from the last checkpoint"
            )
            self.leave(EXIT_FAILED)
            return
