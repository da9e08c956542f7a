"""Stop requests: SIGTERM/SIGINT (docker stop, Ctrl-C, a spot notice's shutdown).

The handler only sets an Event; the training loop polls `StopSignal.requested` after
every optimizer step (a Python attribute read, no device sync), then writes a
checkpoint and exits 75 so the restart policy brings the run back.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignal:
    """Install with `install()`; ask with `requested`; `reason` says what asked."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.state = "stopped"  # status.json state to report: "stopped" or "preempted"
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignal:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def request(self, reason: str, state: str = "stopped") -> None:
        """Ask the loop to stop; signal handlers call this, spot-notice pollers with "preempted"."""
        if self.reason is None:
            self.reason, self.state = reason, state
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)
