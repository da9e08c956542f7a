"""The run's own log: what `train` prints, also kept in `train.log` in its run dir.

Docker keeps a container's output only while the container exists (every `pulumi
destroy` removes it), so `train` writes its stdout and stderr to `train.log` as well,
and the uploader's mirror (`sync`) carries it to `<storageUri>/runs/<id>/` with the
rest of the run dir, every `mirror_every_seconds` and at the end: `fab logs` and
`fab download` have it once the box is gone.

Size-capped: at RUN_LOG_MAX_BYTES the file is rotated to `train.log.1` (the one older
part kept, replacing the one before), so a chatty run never fills the disk or the
bucket. A run resumed on a new box keeps the history: the resume restores the stored
`train.log` as `train.log.1` when this process has begun its own (`resume`).

Only what Python writes to `sys.stdout` and `sys.stderr` (the trainer's lines, its
logging, tracebacks) is kept; rank 0 alone writes it (`RANK` unset or 0). A sweep's
trial, whose output already goes to this file, is left as it is. Torch-free.

Sealed before the process's last upload (`seal_run_log`: a stop's, a finish's, a
failure's, a pending run's): the stored train.log is then the box's, byte for byte, and
`fab download` verifies it against the box's copy. A line written after that upload
(how long it took, a warning that it did not land) reaches the process's stdout and
stderr alone (`docker logs`, `fab logs` while the container is there). A failure's
message, which `__main__` prints after the upload, goes into the log first
(`last_words`).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import TextIO

from trainer.checkpoints.layout import RUN_LOG_FILE, RUN_LOG_ROTATED

RUN_LOG_MAX_BYTES = 16 * 1024 * 1024


class _Tee(io.TextIOBase):
    """Writes to the stream it stands in for, then to the run log (never failing the
    first for the second: a full disk drops log lines, not the trainer's output)."""

    def __init__(self, stream: TextIO, log: RunLog) -> None:
        self._stream, self.log = stream, log

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        self.log.write(text)
        return written

    def flush(self) -> None:
        self._stream.flush()
        self.log.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding


class RunLog:
    """`train.log` in `run_dir`, appended to, rotated at `max_bytes`."""

    def __init__(self, run_dir: Path, max_bytes: int = RUN_LOG_MAX_BYTES) -> None:
        self.path, self.max_bytes = Path(run_dir) / RUN_LOG_FILE, max_bytes
        self._file: TextIO | None = None
        self.sealed = False
        """True once its last upload is under way: it takes no more lines."""

    def write(self, text: str) -> None:
        if self.sealed:
            return
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
            self._file.write(text)
            if "\n" in text:
                self._file.flush()
                if self._file.tell() >= self.max_bytes:
                    self._rotate()
        except (OSError, ValueError):  # full, read-only or closed: the output goes on
            pass

    def flush(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.flush()

    def seal(self) -> None:
        """Flush and close the file; it takes no more lines."""
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.close()
            self._file = None
        self.sealed = True

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        os.replace(self.path, self.path.with_name(RUN_LOG_ROTATED))


def keep_run_log(run_dir: str | Path, max_bytes: int = RUN_LOG_MAX_BYTES) -> RunLog | None:
    """From now on, what this process prints is kept in `run_dir`/train.log too; the log,
    or None where it is not kept (another rank, or stdout is that file already)."""
    if os.environ.get("RANK", "0") != "0":
        return None
    path = Path(run_dir) / RUN_LOG_FILE
    try:
        if os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(path)):
            return None  # a sweep's trial: its output goes to this file already
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # no such file yet, or a stdout with no file behind it
    log = RunLog(Path(run_dir), max_bytes)
    sys.stdout = _Tee(sys.stdout, log)
    sys.stderr = _Tee(sys.stderr, log)
    return log


def seal_run_log(last_words: str = "") -> None:
    """Before this process's last upload: `last_words` (a failure's message, which is
    printed only after the upload) into train.log alone, then train.log takes no more
    lines; the process's output goes on to its stdout and stderr. Nothing where no log
    is kept."""
    logs = {
        id(stream.log): stream.log
        for stream in (sys.stdout, sys.stderr)
        if isinstance(stream, _Tee)
    }
    for log in logs.values():
        if last_words:
            log.write(last_words if last_words.endswith("\n") else last_words + "\n")
        log.seal()
