"""One uploader per run dir: `.uploader.lock`, an flock held while a process uploads it.

Two uploaders of one run dir share its `.outbox` and the store's pointers: each took
the other's staged files for stale, and a late upload of an older checkpoint moved
LATEST back (the box's resume unit restarting an upload-pending run while its user
followed the log's advice and ran `python -m trainer sync`). So `train` (rank 0, with
a store) holds this lock for its whole life and `sync` for its own, and a second one
is refused at once, exit 75 ("try again"), in one line naming the holder. It does not
wait: the holder is a trainer (it uploads for hours, and everything itself) or a sync
(which sends what the second would have sent); the resume unit starts a run that
exited 75 again a minute later, and a user learns at once who holds it.

The kernel drops an flock when its process ends, however it ends: a SIGKILL leaves
no stale lock. The file is a dot file, so never mirrored nor restored; it holds the
holder's pid, command and start, for the refusal's message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".uploader.lock"


class UploaderBusy(Exception):
    """Another process uploads this run dir (exit 75: try again once it has ended)."""


@contextlib.contextmanager
def uploader_lock(run_dir: Path, command: str) -> Iterator[None]:
    """Hold `run_dir`'s uploader lock for the block (`command`: `train` or `sync`, for
    the message a second uploader shows); UploaderBusy when another process holds it.
    Creates the run dir if need be (a run's first start)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UploaderBusy(_busy_message(path, fd)) from None
        holder = {"pid": os.getpid(), "command": command, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _busy_message(path: Path, fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%H:%M:%S UTC", time.gmtime(float(holder["since"])))
        who = f"pid {int(holder['pid'])}, `python -m trainer {holder['command']}` since {since}"
    except (ValueError, KeyError, TypeError):  # written a moment ago, or by hand
        who = "its record unreadable"
    return (
        f"another process uploads {path.parent} ({who}; it holds {path.name}): one uploader "
        "at a time, and that one sends what the store lacks; run this again once it has exited"
    )
