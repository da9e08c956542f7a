"""status.json: the run's record, read by `fab status` and the box's idle watchdog.

Rewritten atomically (temp file + rename) at every log interval and at exit, so a
reader never sees half a file. Keys are fixed by ARCHITECTURE.md. `RunRecord` is the
one reader, for status.json and for heartbeat.json (`{"step", "updated_at"}` plus how
the run ended, written by a box whose ranks write no status): torch-free, so `fab`
reads the box's files with it too. The box programs, which cannot import it, read the
same keys (box/contract.py; tests/box/test_contract.py proves them equal).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from trainer.atomic_write import write_json_atomic

# A finished run whose last uploads did not land (storage down at the end): its
# files are on the box until `python -m trainer sync` (or the run's container
# started again) uploads them.
UPLOAD_PENDING = "finished-upload-pending"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
"""The run's records, one JSON object a line (trainer.reports.progress writes them)."""
STATES = ("running", "preempted", "stopped", "finished", UPLOAD_PENDING, "failed")
# What a run that starts again was, when it did not ask to stop: evicted after a notice,
# or still `running` when its box went down under it.
RECOVERED_FROM = ("preempted", "running")


@dataclass(frozen=True)
class RunRecord:
    """What status.json (or heartbeat.json) says, typed: a key the file lacks, or holds
    with another type (it is written by the container: trusted with nothing), is None."""

    run_id: str | None = None
    state: str | None = None
    """One of STATES."""
    epoch: int | None = None
    step: int | None = None
    total_steps: int | None = None
    train_loss: float | None = None
    val_mae: float | None = None
    windows_per_s: float | None = None
    gpu_memory_gib: float | None = None
    """Peak GPU memory this process reserved (torch's allocator); None on the CPU."""
    eta_s: float | None = None
    last_checkpoint_at: float | None = None
    """Unix seconds."""
    updated_at: float | None = None
    """Unix seconds of the last write."""
    exit_code: int | None = None
    uploads: dict | None = None
    """None without --checkpoint-uri, else `pending`, `failing_since`, `last_uploaded_at`."""
    recoveries: int | None = None
    """Starts after a stop the run did not ask for (a spot eviction, a host failure)."""
    time_lost_s: float | None = None
    """Seconds between those stops and the starts that followed them, summed."""
    ran: list | None = None
    """[start, last write] of each process that trained the run (unix s), oldest first:
    the spans its dollars count (trainer.reports.cost)."""

    @classmethod
    def from_dict(cls, data: object) -> RunRecord:
        if not isinstance(data, dict):
            return cls()
        kept = {}
        for field in fields(cls):
            value = data.get(field.name)
            if _fits(value, field.type) and (field.name != "state" or value in STATES):
                kept[field.name] = value
        return cls(**kept)

    @classmethod
    def parse(cls, text: str | bytes | None) -> RunRecord:
        """The record in `text`; an empty one for None, a torn file or another shape."""
        try:
            return cls.from_dict(json.loads(text)) if text else cls()
        except (ValueError, RecursionError):  # torn, or nested past what json follows
            return cls()

    @classmethod
    def read(cls, run_dir: Path, name: str = STATUS_FILE) -> RunRecord:
        try:
            return cls.parse((Path(run_dir) / name).read_bytes())
        except OSError:
            return cls()

    def after_restart(self, now: float) -> dict[str, Any]:
        """`recoveries` and `time_lost_s` for a new start of the run this record is of:
        one more when the run was preempted or died running (its box went down with it),
        the time since it last said anything lost to that."""
        recoveries, lost = self.recoveries or 0, self.time_lost_s or 0.0
        if self.state in RECOVERED_FROM:
            recoveries += 1
            lost += max(0.0, now - (self.updated_at or now))
        return {"recoveries": recoveries, "time_lost_s": round(lost, 1)}

    def known(self) -> dict[str, Any]:
        """The keys the file had (with their types), as a dict."""
        return {key: value for key, value in asdict(self).items() if value is not None}


STATUS_KEYS = tuple(field.name for field in fields(RunRecord))


_KINDS = {"int": int, "float": (int, float), "str": str, "dict": dict, "list": list}


def _fits(value: object, annotation: str) -> bool:
    """`value` is of the field's type (`int | None` -> int); a bool is no number here."""
    return not isinstance(value, bool) and isinstance(value, _KINDS[annotation.split(" ")[0]])


class StatusWriter:
    """Holds the latest values; `write(**changes)` merges them and rewrites the file."""

    def __init__(
        self,
        run_dir: Path,
        run_id: str,
        total_steps: int | None,
        uploads: Callable[[], dict[str, Any] | None] | None = None,
        *,
        fields: dict[str, Any] | None = None,
        trains_since: float | None = None,
    ) -> None:
        """`trains_since`: this process trains the run since then (unix s), so its span
        opens in `ran` and every write moves its end (a writer that only records an
        ending or an upload adds none)."""
        self.path = Path(run_dir) / STATUS_FILE
        self.fields: dict[str, Any] = dict.fromkeys(STATUS_KEYS)
        self.fields.update(run_id=run_id, state="running", total_steps=total_steps)
        # A status written before (its step, epoch...), kept where this run says nothing.
        self.fields.update({k: v for k, v in (fields or {}).items() if k in STATUS_KEYS})
        # Asked at every write, not pushed by the uploader: its thread never touches
        # the file, and a stalled upload still shows at the next log interval.
        self._uploads = uploads
        self._span: list[float] | None = None
        if trains_since is not None:
            self._span = [trains_since, time.time()]
            self.fields["ran"] = [*(self.fields.get("ran") or []), self._span]

    def write(self, **changes: Any) -> None:
        unknown = set(changes) - set(STATUS_KEYS)
        assert not unknown, f"status.json has no keys {unknown}"
        assert changes.get("state", "running") in STATES, changes["state"]
        uploads = self._uploads() if self._uploads is not None else None
        self.fields.update(changes, updated_at=time.time(), uploads=uploads)
        if self._span is not None:
            self._span[1] = self.fields["updated_at"]
        write_json_atomic(self.path, self.fields)
