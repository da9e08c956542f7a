"""Where an object key may land on this machine: the one rule for every download.

Whoever can write the bucket (the box's identity, and so anything running on the
box or in its containers) chooses the keys we list. A key is data, not a path: it
becomes one only through `local_path`, which refuses a key with a `..` or `.` part,
an empty part (`a//b`, a leading or trailing `/`), a backslash (a separator on
Windows), a control character, or one that resolves (symlinks included) outside the
destination. `fab download`, resume's restore of run files, the checkpoint pointers
and the box's dataset fetch all map keys through it, so a refused key is never
written; callers report it.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.storage.store import StorageError


class UnsafeKey(StorageError, ValueError):
    """An object key that would be written outside its destination directory."""


def key_problem(key: str) -> str | None:
    """Why `key` cannot name a file under a destination, or None when it can."""
    if not isinstance(key, str) or not key:
        return "it is empty"
    if any(ord(char) < 32 or ord(char) == 127 for char in key):
        return "it holds a control character"
    if "\\" in key:
        return "it holds a backslash"
    if key.startswith("/"):
        return "it starts with '/'"
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "it has an empty, '.' or '..' part"
    return None


def local_path(root: Path, key: str) -> Path:
    """`root / key`, or UnsafeKey when that file would not lie inside `root`."""
    problem = key_problem(key)
    if problem is None:
        path = Path(root) / key
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
        if os.path.commonpath([real_root, real]) == real_root and real != real_root:
            return path
        problem = f"it resolves to {real}, outside {real_root}"
    raise UnsafeKey(f"refused object key {key!r}: {problem}")
