"""Files anyone with a login can write, read by root programs without trusting them.

The run dirs and leases belong to the SSH user (and to anyone in the docker group).
A symlink could point the root watchdog at any file, a FIFO would hang a plain
open(), a huge file would eat its memory, a deeply nested one would blow the JSON
parser's recursion (a RecursionError, which no `except ValueError` catches), and a
timestamp far in the future would keep the box "busy" forever. So: every path
component is opened without following links, non-blocking, only regular files are
read, only up to a size cap and a nesting cap; timestamps later than the clock
allows are dropped. A file that breaks a rule reads as absent: it costs only the run
or lease it belongs to. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

MAX_JSON_BYTES = 64 * 1024
# Our own files nest 2 deep at most (status.json's `uploads`); json's parser recurses
# once per level, and 64 KB can nest 32,000 deep, far past Python's recursion limit.
MAX_JSON_DEPTH = 32
# Python 3.10 parses a 60,000-digit number in quadratic time, and 3.11+ cannot even
# print one back (`fab status` reads the state it would land in); steps and times fit 20.
MAX_INT_DIGITS = 20
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_NESTING = re.compile(rb"[\[\]{}]")
# Host and container share the kernel clock; this only absorbs rounding and NTP steps.
CLOCK_SKEW_SECONDS = 300
_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def _open_below(root: Path, parts: tuple[str, ...], final_flags: int) -> int:
    """An fd for root/parts..., no component a symlink; raises OSError."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)
    try:
        for index, part in enumerate(parts):
            if part in ("", ".", "..") or "/" in part:
                raise OSError(f"refusing path component {part!r}")
            last = index == len(parts) - 1
            flags = final_flags if last else os.O_RDONLY | os.O_DIRECTORY
            child = os.open(part, flags | _NO_FOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(root: Path, *parts: str, max_bytes: int) -> bytes | None:
    """The bytes of a regular file below `root` (a trusted directory), or None."""
    try:
        fd = _open_below(root, parts, os.O_RDONLY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        return os.read(fd, max_bytes + 1)[:max_bytes]
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json(root: Path, *parts: str) -> dict | None:
    """The JSON object in root/parts..., or None when absent, unsafe, too big, too deep
    or not one."""
    data = read_bytes(root, *parts, max_bytes=MAX_JSON_BYTES)
    if data is None or nesting_depth(data) > MAX_JSON_DEPTH:
        return None
    try:
        value = json.loads(data, parse_int=_bounded_int)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in the JSON text `data`, found without parsing
    it (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in _JSON_NESTING.finditer(_JSON_STRING.sub(b'""', data)):
        depth += 1 if bracket.group() in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"a number of {len(digits)} digits")
    return int(digits)


def directory_names(root: Path, *parts: str) -> Iterator[str]:
    """Names in the directory root/parts... (reached without links); none when unsafe."""
    try:
        fd = _open_below(root, parts, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return iter(())
    try:
        return iter(sorted(os.listdir(fd)))
    except OSError:
        return iter(())
    finally:
        os.close(fd)


def sane_time(value: object, now: float) -> float | None:
    """A unix time that is not from the future, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or not 0 < value <= now + CLOCK_SKEW_SECONDS:
        return None
    return float(value)
