"""The sweep's folder to `<storageUri>/sweeps/<id>/`, what changed since the last pass.

So the queue, the trials' states and the report outlive the box, and `fab runs --sweep`
reads them with the boxes stopped. Storage down: one warning, the next pass tries
again; the sweep itself never waits on it. The stop marker and lock files stay home.
"""

from __future__ import annotations

import logging
from pathlib import Path

from box.contract import STOPPED_BY_USER, sweep_uri
from trainer.storage import open_store
from trainer.sweep.spec import SweepSpec

log = logging.getLogger(__name__)


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
            and path.name != STOPPED_BY_USER
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
