"""status.json: the run's heartbeat, read by `fab status` and the box's idle watchdog.

Rewritten atomically (temp file + rename) at every log interval and at exit, so a
reader never sees half a file. Keys are fixed by ARCHITECTURE.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.atomic_write import write_json_atomic

# A finished run whose last uploads did not land (storage down at the end): its
# files are on the box until `python -m trainer sync` (or the run's container
# started again) uploads them.
UPLOAD_PENDING = "finished-upload-pending"
STATES = ("running", "preempted", "stopped", "finished", UPLOAD_PENDING, "failed")
STATUS_KEYS = (
    "run_id",
    "state",
    "epoch",
    "step",
    "total_steps",
    "train_loss",
    "val_mae",
    "windows_per_s",
    "gpu_memory_gib",
    "eta_s",
    "last_checkpoint_at",
    "updated_at",
    "exit_code",
    "uploads",
)


def read_status(run_dir: Path) -> dict[str, Any]:
    """The run dir's status.json, or {} when there is none (or it is not a JSON object)."""
    try:
        status = json.loads((Path(run_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


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
    ) -> None:
        self.path = Path(run_dir) / "status.json"
        self.fields: dict[str, Any] = dict.fromkeys(STATUS_KEYS)
        self.fields.update(run_id=run_id, state="running", total_steps=total_steps)
        # A status written before (its step, epoch...), kept where this run says nothing.
        self.fields.update({k: v for k, v in (fields or {}).items() if k in STATUS_KEYS})
        # Asked at every write, not pushed by the uploader: its thread never touches
        # the file, and a stalled upload still shows at the next log interval.
        self._uploads = uploads

    def write(self, **changes: Any) -> None:
        unknown = set(changes) - set(STATUS_KEYS)
        assert not unknown, f"status.json has no keys {unknown}"
        assert changes.get("state", "running") in STATES, changes["state"]
        uploads = self._uploads() if self._uploads is not None else None
        self.fields.update(changes, updated_at=time.time(), uploads=uploads)
        write_json_atomic(self.path, self.fields)
