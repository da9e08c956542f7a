"""File writes with a hard time limit: a stalled disk cannot hold up a stop.

A write to a frozen or failing file system blocks in the kernel (D state), where
SIGKILL cannot end it, and the writer with it: a watchdog stuck writing its stop
record never reaches the deallocate or shutdown, which needs no disk. So each write
on the way to a stop runs in a forked child; the caller waits for it a bounded time,
then kills it (or leaves it behind in the kernel) and goes on. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Callable

WRITE_TIMEOUT_SECONDS = 5
_MAX_ERROR_BYTES = 500


def write_within(write: Callable[[], None], timeout_seconds: float = WRITE_TIMEOUT_SECONDS) -> None:
    """Run `write` in a child process and wait at most `timeout_seconds` for it.

    Raises OSError with the child's error, or TimeoutError (an OSError) when the disk
    did not answer in time. Worst case: `timeout_seconds`.
    """
    sys.stdout.flush()  # or the child's copy of the buffer would print it twice
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read_end)
            _let_go_of_output()
            write()
            status = 0
        except Exception as error:
            os.write(write_end, str(error).encode(errors="replace")[:_MAX_ERROR_BYTES])
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        # The pipe turns readable when the child reports an error or exits (end of file).
        ready, _, _ = select.select([read_end], [], [], timeout_seconds)
        if not ready:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)
            raise TimeoutError(f"the disk did not answer within {timeout_seconds:.0f}s")
        error = os.read(read_end, _MAX_ERROR_BYTES).decode(errors="replace")
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)  # it has closed its files: it is exiting
    if error or status != 0:
        raise OSError(error or f"the writer ended with wait status {status}")


def _let_go_of_output() -> None:
    """A child left behind in the kernel keeps its files open: not the caller's stdout
    and stderr, which someone may read to their end (journald, a test)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
