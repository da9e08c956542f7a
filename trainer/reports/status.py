"""status.json: the run's record, read by `fab status` and the box's idle watchdog.

Rewritten atomically (temp file + rename) at every log interval and at exit, so a
reader never sees half a file. Keys are fixed by ARCHITECTURE.md. `RunRecord` is the
one reader, for status.json and for heartbeat.json (`{"step", "updated_at"}` plus how
the run ended, written by a box whose ranks write no status); it, the keys and the
states are the box's contract (`box.contract.RunRecord`), which `fab` and the box
programs read the files with too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from box.contract import STATE_RUNNING, STATES, STATUS_FILE, STATUS_KEYS
from trainer.atomic_write import write_json_atomic


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
        self.fields.update(run_id=run_id, state=STATE_RUNNING, total_steps=total_steps)
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
        assert not unknown, f"{STATUS_FILE} has no keys {unknown}"
        assert changes.get("state", STATE_RUNNING) in STATES, changes["state"]
        uploads = self._uploads() if self._uploads is not None else None
        self.fields.update(changes, updated_at=time.time(), uploads=uploads)
        if self._span is not None:
            self._span[1] = self.fields["updated_at"]
        write_json_atomic(self.path, self.fields)
