"""A run's log from the stack's storage, for a run no container holds any more.

Docker keeps a run's output only while its container exists; every run also writes it
to `train.log` in its run dir (trainer.checkpoints.run_log: size-capped, the part before
the cap in `train.log.1`), mirrored to `<storageUri>/runs/<id>/` with the checkpoints,
so it outlives the container and the box.

The bucket is not trusted to hold what the trainer wrote (whose cap is 2 x 16 MB): the
log is read in ranged reads of READ_BLOCK_BYTES (a ranged GET on S3 and Blob, a seek
on a file), never whole. `--tail N` reads from the end back to the start of its N
lines, and no further than TAIL_READ_LIMIT_BYTES; every line goes through
`ops.runs.log_lines.LogLines` (made safe, cut past its cap), so memory and output are
bounded whatever the object holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from box.contract import RUN_LOG_FILE, RUN_LOG_ROTATED
from ops.runs.log_lines import LINE_CAP_CHARACTERS, LogLines
from trainer.storage import ObjectStore

READ_BLOCK_BYTES = 256 * 1024
"""One ranged read."""
TAIL_READ_LIMIT_BYTES = 32 * 1024 * 1024
"""The most `--tail N` reads back from the end, however long its N lines are."""
LINE_BYTES = 4 * LINE_CAP_CHARACTERS
"""A shown line's share of a tail's reading: its cap in UTF-8's widest characters."""
NOT_READ = "[… the start of the next line is further back than `fab logs --tail` reads]"


@dataclass(frozen=True)
class StoredLog:
    """The run's stored log: `train.log.1` (when kept) then `train.log`, as one run of
    bytes read by ranges."""

    store: ObjectStore
    parts: tuple[tuple[str, int], ...]
    """(key, size) of each object, oldest first."""

    @property
    def size(self) -> int:
        return sum(size for _, size in self.parts)

    def read(self, start: int, length: int) -> bytes:
        """Up to `length` bytes from byte `start` of the whole log (the parts joined)."""
        found, offset = [], 0
        for key, size in self.parts:
            first, last = max(start, offset), min(start + length, offset + size)
            if first < last:
                found.append(self.store.read_range(key, first - offset, last - first))
            offset += size
        return b"".join(found)


def find_in(folder_uri: str) -> StoredLog | None:
    """The stored log in a run's or a sweep's folder (`train.log`, the driver's in a
    sweep's), or None when it has none."""
    from trainer.storage import open_store

    store = open_store(folder_uri)
    listed = store.list_info(RUN_LOG_FILE)
    parts = tuple(
        (key, listed[key].size) for key in (RUN_LOG_ROTATED, RUN_LOG_FILE) if key in listed
    )
    return StoredLog(store, parts) if parts else None


def show(log: StoredLog, tail: str, lines: LogLines) -> None:
    """Write the last `tail` lines of `log` (`all`: every line, as `docker logs --tail`
    takes it) to `lines`."""
    if not tail.isdigit():
        for start in range(0, log.size, READ_BLOCK_BYTES):
            lines.write_bytes(log.read(start, READ_BLOCK_BYTES))
    elif int(tail) > 0:
        partial, found = _tail(log, int(tail))
        if partial:
            lines.say(NOT_READ)
        lines.write_bytes(found)
    lines.close()


def _tail(log: StoredLog, count: int) -> tuple[bool, bytes]:
    """The last `count` lines of `log`, and whether the first of them is partial (its
    start lies past what a tail reads: TAIL_READ_LIMIT_BYTES, or a share per line).
    Read backwards a block at a time, only until those lines' start is found."""
    limit = min(count * LINE_BYTES + READ_BLOCK_BYTES, TAIL_READ_LIMIT_BYTES)
    end = start = log.size
    blocks: list[bytes] = []
    newlines = 0
    while start > 0 and end - start < limit and newlines < count:
        first = max(start - READ_BLOCK_BYTES, 0, end - limit)
        block = log.read(first, start - first)
        if not block:  # the object shrank since it was listed (rotated): what was read
            break
        newlines += block.count(b"\n") - (not blocks and block.endswith(b"\n"))
        blocks.insert(0, block)
        start = first
    data = b"".join(blocks)
    ended = data.endswith(b"\n")
    found = (data[:-1] if ended else data).split(b"\n")
    shown = b"\n".join(found[-count:]) + b"\n" * ended
    return start > 0 and len(found) <= count, shown


def no_log_message(what: str, where: str, folder_uri: str) -> str:
    """`what` (`run ID`, `sweep ID`) has no container on `where` and no stored log."""
    kind, _, name = what.partition(" ")
    return (
        f"no container holds {what} on {where}, and there is no {folder_uri}/{RUN_LOG_FILE} "
        f"(a {kind} killed before its first upload has none); `fab status --run {name}` "
        "or `fab runs` shows its record"
    )
