"""Background threads that yield the CPU to training.

On a busy box (a small CPU box, or a GPU box whose cores feed the data pipeline) a
checkpoint write or upload should wait rather than a training step: the trainer's
own background threads run at a lower priority than its training thread.
"""

from __future__ import annotations

import contextlib
import os
import threading

BACKGROUND_NICENESS = 10


def lower_thread_priority() -> None:
    """Lower the calling thread's priority (threads it starts afterwards inherit it)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: the scheduler decides
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)
