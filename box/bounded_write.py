"""File writes with a hard time limit: a stalled disk cannot hold up a stop.

A write to a frozen or failing file system blocks in the kernel (D state), where
SIGKILL cannot end it, and the writer with it: a watchdog stuck writing its stop
record never reaches the deallocate or shutdown, which needs no disk. So each write
on the way to a stop runs in a forked child; the caller waits for it a bounded time,
then kills it (or leaves it behind in the kernel) and goes on. `run_within` is that
child, for any work that must not outlive its time (box/bounded_post.py makes every
request to a cloud in one). What a child reports reaches the caller whole, whatever its
size (a role's credentials document, a metadata answer), up to MAX_REPORT_BYTES: a
pipe's first 4096 bytes alone once cut a larger credentials document, and every SNS
publish signed with it failed. Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import sys
import time
from collections.abc import Callable

WRITE_TIMEOUT_SECONDS = 5
_MAX_ERROR_BYTES = 500
MAX_REPORT_BYTES = 16 * 1024 * 1024
"""What a child may report in all; one that says more is killed, its report marked cut."""
READ_BYTES = 64 * 1024
"""Read from the pipe at a time (a pipe's buffer on Linux)."""
_FAILED = "\x00"
"""Starts the one report line a child's exception leaves."""


@dataclasses.dataclass(frozen=True)
class ChildReport:
    """What a child reported, line by line, before it ended or its time ran out."""

    lines: list[str]
    error: str | None
    """The child's exception, when it raised one."""
    ended: bool
    """False when its time ran out (it was killed, or left behind in the kernel)."""
    status: int = 0
    """Its wait status, once it ended."""


def run_within(
    work: Callable[[Callable[[str], None]], None], timeout_seconds: float
) -> ChildReport:
    """Run `work(report)` in a forked child and wait at most `timeout_seconds` for it;
    `report(line)` hands the caller one line at once (it reads them as they come, so a
    child killed half way still said what it had done). Worst case: `timeout_seconds`."""
    sys.stdout.flush()  # or the child's copy of the buffer would print it twice
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(work, read_end, write_end)
    os.close(write_end)
    give_up = time.monotonic() + timeout_seconds
    said, ended, cut = bytearray(), False, False
    try:
        while True:
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, READ_BYTES)
            if not chunk:  # it has closed its files: it is exiting
                ended = True
                break
            said += chunk
            if len(said) > MAX_REPORT_BYTES:
                cut = True
                break
    finally:
        os.close(read_end)
        if not ended:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)
    status = os.waitpid(pid, 0)[1] if ended else _reap_if_dead(pid)
    lines = said.decode(errors="replace").splitlines()
    error = next((line[1:] for line in lines if line.startswith(_FAILED)), None)
    if cut:
        error = f"the child reported more than {MAX_REPORT_BYTES} bytes; cut"
    return ChildReport(
        [line for line in lines if not line.startswith(_FAILED)], error, ended, status
    )


def _child(work: Callable[[Callable[[str], None]], None], read_end: int, write_end: int) -> None:
    status = 1
    try:
        os.close(read_end)
        _let_go_of_output()
        work(lambda line: _write_all(write_end, f"{line}\n".encode(errors="replace")))
        status = 0
    except Exception as error:
        message = " ".join(str(error).split()) or type(error).__name__
        failed = _FAILED + message[:_MAX_ERROR_BYTES] + "\n"
        _write_all(write_end, failed.encode(errors="replace"))
    finally:
        os._exit(status)


def _write_all(descriptor: int, data: bytes) -> None:
    """All of `data`: a write to a pipe may take part of it (the caller reads as it comes)."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _reap_if_dead(pid: int) -> int:
    """A killed child is reaped if it is gone already; one stuck in the kernel is left."""
    with contextlib.suppress(ChildProcessError):
        return os.waitpid(pid, os.WNOHANG)[1]
    return 0


def lines_within(
    work: Callable[[Callable[[str], None]], None], timeout_seconds: float, late: str
) -> list[str]:
    """The lines `work(report)` reported, run as `run_within` runs it: all of them, or
    OSError with the child's error (a report cut included), TimeoutError (an OSError)
    saying `late` when it did not end in time, or OSError when it ended otherwise than
    by returning (killed: its lines may be cut short). Worst case: `timeout_seconds`."""
    child = run_within(work, timeout_seconds)
    if child.error:
        raise OSError(child.error)
    if not child.ended:
        raise TimeoutError(late)
    if child.status != 0:
        raise OSError(f"the child ended with wait status {child.status}")
    return child.lines


def write_within(write: Callable[[], None], timeout_seconds: float = WRITE_TIMEOUT_SECONDS) -> None:
    """Run `write` in a child process and wait at most `timeout_seconds` for it.

    Raises OSError with the child's error, or TimeoutError (an OSError) when the disk
    did not answer in time. Worst case: `timeout_seconds`.
    """
    lines_within(
        lambda report: write(),
        timeout_seconds,
        f"the disk did not answer within {timeout_seconds:.0f}s",
    )


def _let_go_of_output() -> None:
    """A child left behind in the kernel keeps its files open: not the caller's stdout
    and stderr, which someone may read to their end (journald, a test)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
