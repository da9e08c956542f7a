"""Run a command with a hard time limit, even one the kernel cannot kill.

`subprocess.run(timeout=...)` kills the child on timeout and then waits for it
without a limit: an `nvidia-smi` stuck in the kernel (a GPU fallen off the bus)
ignores SIGKILL, and the watchdog would wait with it. Here the whole process group
is killed, reaped for a moment, and otherwise left behind. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

REAP_SECONDS = 2


class CommandTimeout(RuntimeError):
    """The command ran past its limit and was killed (or abandoned)."""


def run_bounded(args: list[str], timeout_seconds: float) -> subprocess.CompletedProcess:
    """Run `args` capturing text output; raises OSError or CommandTimeout.

    Worst case: timeout_seconds + REAP_SECONDS.
    """
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):  # already gone
            os.killpg(process.pid, signal.SIGKILL)
        # An unkillable one (uninterruptible sleep) is left behind: the caller goes on.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=REAP_SECONDS)
        for pipe in (process.stdout, process.stderr):
            pipe.close()
        raise CommandTimeout(f"{args[0]}: no answer within {timeout_seconds:.0f}s") from None
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
