"""Files that are whole or absent: write a temp file beside the target, rename it over.

A reader (`fab status`, the box's watchdog, a resume) never sees half a file. With
`durable=True` the file and its directory are also fsynced, for checkpoints and their
hashes that must survive a power cut; the JSON files rewritten at every log interval
skip that (the next interval rewrites them, and the loop should not wait on the disk).
Temp names start with "." and hold ".tmp-": the uploader skips them and the checkpoint
manager removes the ones a crash left.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def temp_path(path: Path) -> Path:
    """The private name a write goes to before it is renamed over `path`."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make what was written to `path` (through any handle) durable; no-op if absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_atomic(path: Path, *, durable: bool = False) -> Iterator[BinaryIO]:
    """A handle to write `path` through: it appears under its name, whole, only when
    the block ends without an exception (streamed, so no copy of the data is needed)."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with tmp.open("wb") as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        # A full disk or a read-only dir fails the write: leave no temp file behind.
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes | memoryview, *, durable: bool = False) -> None:
    with open_atomic(path, durable=durable) as handle:
        handle.write(data)


def write_json_atomic(path: Path, payload: Any) -> None:
    """Indented JSON and a final newline, as `cat` and `jq` users expect."""
    write_bytes_atomic(path, (json.dumps(payload, indent=2) + "\n").encode())
