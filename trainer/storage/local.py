"""The `file://` backend: a directory, written atomically (temp file + rename)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG
from typing import BinaryIO

from trainer.storage.store import (
    FILE_COPY_CHUNK_BYTES,
    ObjectInfo,
    ObjectNotFound,
    Progress,
    StorageError,
)


class FileStore:
    """A directory: writes go to a temp file in the same directory, then rename."""

    def __init__(self, uri: str, root: Path) -> None:
        self.uri = uri
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key.strip("/")).resolve()
        if path != self.root.resolve() and self.root.resolve() not in path.parents:
            raise StorageError(f"key {key!r} escapes the store root {self.root}")
        return path

    def _atomic_write(self, target: Path, write: Callable[[object], None]) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        with open(path, "rb") as source:
            self._atomic_write(self._path(key), lambda out: _copy(source, out, progress))

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        with self._open_object(key) as source:
            self._atomic_write(Path(path), lambda out: _copy(source, out, progress))

    def read_bytes(self, key: str) -> bytes:
        with self._open_object(key) as source:
            return source.read()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with self._open_object(key) as source:
            source.seek(start)
            return source.read(length)

    def _open_object(self, key: str) -> BinaryIO:
        """The object's file, opened; ObjectNotFound for anything but a plain file, as
        the listing says: a FIFO (whose read would wait for a writer for ever), a
        folder, a device."""
        try:
            # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
            descriptor = os.open(self._path(key), os.O_RDONLY | os.O_NONBLOCK)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if self.root.exists() and not self.root.is_dir():
                raise  # the store's own directory is not one: an outage, not a miss
            raise ObjectNotFound(f"{self.uri}: no object {key!r}") from None
        if not S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise ObjectNotFound(f"{self.uri}: no object {key!r} (not a plain file)")
        return os.fdopen(descriptor, "rb")

    def write_bytes(self, key: str, data: bytes) -> None:
        self._atomic_write(self._path(key), lambda out: out.write(data))

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        if not self.root.is_dir():
            return {}
        listed = {}
        for path in self.root.rglob("*"):
            key = path.relative_to(self.root).as_posix()
            if path.name.endswith(".tmp") or not key.startswith(prefix.lstrip("/")):
                continue
            try:
                # lstat: a symlink in the store is no object (it would read a file outside).
                stat = path.lstat()
            except FileNotFoundError:  # replaced or deleted while listed
                continue
            if S_ISREG(stat.st_mode):
                listed[key] = ObjectInfo(stat.st_size, f"{stat.st_ino}-{stat.st_mtime_ns}")
        return listed

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()


def _copy(source: BinaryIO, out: BinaryIO, progress: Progress | None) -> None:
    while chunk := source.read(FILE_COPY_CHUNK_BYTES):
        out.write(chunk)
        if progress:
            progress(len(chunk))
