"""The sweep's folder to `<storageUri>/sweeps/<id>/`, what changed since the last pass.

So the queue, the trials' states and the report outlive the box, and `fab runs --sweep`
reads them with the boxes stopped. Storage down: one warning, the next pass tries
again; the sweep itself never waits on it. The stop marker and lock files stay home.
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainer.box_files import STOP_MARKER
from trainer.storage import open_store
from trainer.sweep.spec import SweepSpec

log = logging.getLogger(__name__)

SWEEPS_PREFIX = "sweeps"


def sweep_uri(storage_uri: str, sweep_id: str) -> str:
    """The sweep's folder in storage (stack.storage_layout.sweep_uri is `fab`'s copy)."""
    return f"{storage_uri.rstrip('/')}/{SWEEPS_PREFIX}/{sweep_id}"


class Mirror:
    def __init__(self, spec: SweepSpec, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.uri = sweep_uri(spec.storage_uri, spec.sweep_id)
        self.sent: dict[str, tuple[int, int]] = {}
        self.failing = False

    def _files(self) -> list[Path]:
        return sorted(
            path
            for path in self.sweep_dir.rglob("*")
            if path.is_file()
            and not path.is_symlink()
            and not path.name.startswith(".")
            and path.name != STOP_MARKER
            and not path.name.endswith((".lock", ".tmp"))
        )

    def sync(self) -> None:
        try:
            store = open_store(self.uri)
            for path in self._files():
                key = path.relative_to(self.sweep_dir).as_posix()
                stat = path.stat()
                signature = (stat.st_size, stat.st_mtime_ns)
                if self.sent.get(key) != signature:
                    store.put_file(key, path)
                    self.sent[key] = signature
        except Exception as error:  # storage down: the sweep goes on, the next pass retries
            if not self.failing:
                log.warning("sweep: mirror to %s failed (%s); retrying each pass", self.uri, error)
            self.failing = True
            return
        if self.failing:
            log.warning("sweep: mirror to %s works again", self.uri)
        self.failing = False
