"""`CheckpointManager`: the one object `train.py` talks to about checkpoints.

When to save, the files (`trainer.checkpoints.checkpoint_file`), the newest valid
state to resume from (local or at `--checkpoint-uri`, see
`trainer.checkpoints.resume`) and the background upload
(`trainer.checkpoints.sync`). A save blocks the loop only for a snapshot of the
state; the write, the links, pruning and handing the file to the uploader follow in
that order on a writer thread (`trainer.checkpoints.writer`). `flush`, `close` and
`load_best` wait for it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from box.contract import BEST_CHECKPOINT, LAST_CHECKPOINT, METRICS_FILE
from trainer.atomic_write import fsync_file
from trainer.checkpoints import layout
from trainer.checkpoints.checkpoint_file import (
    STEP_FILE_GLOB,
    checkpoint_name,
    link_atomic,
    load,
    open_run_store,
    save,
    sidecar_path,
)
from trainer.checkpoints.resume import Check, Found, find_newest
from trainer.checkpoints.sync import RunSync, SyncConfig
from trainer.checkpoints.writer import BackgroundWriter, snapshot
from trainer.config import UserError

log = logging.getLogger(__name__)

# Run files on disk before each checkpoint is: a resume from it, after a power cut,
# finds every metrics record up to its step (the loop writes them before it saves).
DURABLE_WITH_CHECKPOINTS = (METRICS_FILE,)
SYNC_STOP_SECONDS = 1.0


@dataclass(frozen=True)
class CheckpointConfig:
    directory: Path
    """Local checkpoint dir, normally `<run_dir>/checkpoints` (its parent is mirrored)."""
    every_seconds: float = 600.0
    """Save when this many seconds passed since the previous save (0 = off)."""
    every_steps: int | None = None
    """Save every this many optimizer steps (None = off)."""
    uri: str | None = None
    """The run's remote dir (file://, s3://, az://); None keeps everything local."""
    keep_last: int = 3
    """Checkpoints kept besides best, locally and in the store."""

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise UserError(f"keep_last {self.keep_last}: must be at least 1")
        if self.every_seconds < 0:
            raise UserError(f"--checkpoint-every {self.every_seconds}: must be >= 0 seconds")
        if self.every_steps is not None and self.every_steps < 1:
            raise UserError(f"--checkpoint-every-steps {self.every_steps}: must be >= 1")


class CheckpointManager:
    """When to save, where (step files, `last.pt`, `best.pt`), upload, and resume."""

    def __init__(self, config: CheckpointConfig) -> None:
        self.config = config
        self.directory = Path(config.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.last_path = self.directory / LAST_CHECKPOINT
        self.best_path = self.directory / BEST_CHECKPOINT
        self.last_saved_at: float | None = None  # unix seconds, for status.json
        self._last_save_monotonic = time.monotonic()
        self._last_save_step = 0
        self._newest: Path | None = None
        self._published: set[str] = set()  # touched by the writer thread once saving
        self._writer = BackgroundWriter()
        for stale in self.directory.glob(".*.tmp-*"):  # a crash mid-save left it
            stale.unlink(missing_ok=True)
        self.store = open_run_store(config.uri) if config.uri else None
        self.sync: RunSync | None = None
        if self.store is not None:
            sync_config = SyncConfig(keep_last=config.keep_last)
            # The checkpoint dir's parent is the run dir: metrics, tb/, plots sync too.
            self.sync = RunSync(self.store, self.directory.parent, sync_config).start()

    def due(self, step: int) -> bool:
        """Whether the time- or step-based policy asks for a checkpoint now."""
        every_steps = self.config.every_steps
        if every_steps and step - self._last_save_step >= every_steps:
            return True
        every_seconds = self.config.every_seconds
        return bool(every_seconds) and time.monotonic() - self._last_save_monotonic >= every_seconds

    def save_last(self, state: dict[str, Any]) -> Path:
        """Snapshot `state` now, write it in the background; the path it will have."""
        return self._save(state, best=False)

    def save_best(self, state: dict[str, Any]) -> Path:
        """As `save_last`, and `best.pt` follows too."""
        return self._save(state, best=True)

    def _save(self, state: dict[str, Any], *, best: bool) -> Path:
        path = self.directory / checkpoint_name(state)
        copy = None
        if path != self._newest:  # else save_best then save_last of one state: written once
            self._writer.wait()  # one snapshot in flight at most
            copy = snapshot(state)
        self._newest = path
        self._mark_saved(int(state["step"]))
        self._writer.submit(lambda: self._write(path, copy, best=best))
        return path

    def _write(self, path: Path, state: dict[str, Any] | None, *, best: bool) -> None:
        """On the writer thread: the file (unless `state` is None: it is written),
        then the links, pruning and the upload, in that order."""
        if state is not None:
            for name in DURABLE_WITH_CHECKPOINTS:
                fsync_file(self.directory.parent / name)
            digest = save(path, state)
            self._published.discard(path.name)
        else:
            digest = layout.parse_hash_line(sidecar_path(path).read_text())
        link_atomic(path, self.last_path)
        if best:
            link_atomic(path, self.best_path)
        self._prune()
        if self.sync is not None and (best or path.name not in self._published):
            self.sync.publish_checkpoint(path, digest, best=best)
            self._published.add(path.name)

    def load_best(self) -> dict[str, Any]:
        """The best checkpoint's state (the newest when none was best yet), once written."""
        self._writer.wait()
        return load(self.best_path if self.best_path.exists() else self.last_path)

    def _prune(self) -> None:
        names = sorted(p.name for p in self.directory.glob(STEP_FILE_GLOB))
        for name in names[: -self.config.keep_last]:
            (self.directory / name).unlink(missing_ok=True)
            sidecar_path(self.directory / name).unlink(missing_ok=True)

    def load_latest(self, check: Check) -> dict[str, Any] | None:
        """The checkpoint to resume from, here or in the store (`trainer.checkpoints.resume`), or
        None for a fresh run; `check` says why a state cannot continue this run."""
        found = find_newest(self.directory, self.store, check)
        if self.sync is not None:
            self._resume_uploads(found)
        if found is None:
            return None
        self._newest = found.path
        if found.path.name.startswith("step-"):
            link_atomic(found.path, self.last_path)
        self._mend_record(self.best_path)
        self._mark_saved(int(found.state["step"]))
        return found.state

    def _resume_uploads(self, found: Found | None) -> None:
        """Now that the store is known to be this run's: upload what an earlier process
        left waiting (a best whose step file is gone may be only in the outbox) and the
        checkpoint the run goes on from if the store lacks it (killed before its upload)."""
        ours = found is not None and not found.fetched  # else the store's history won
        upto = checkpoint_name(found.state) if ours else None
        queued = self.sync.resume_outbox(self.best_path, upto)
        if found is not None and not found.in_store:
            if found.path.name not in queued:
                self.sync.publish_checkpoint(found.path, layout.sha256_of(found.path))
            self._published.add(found.path.name)

    def _mend_record(self, link: Path) -> None:
        """A kill inside `link_atomic`, between its rename and its record, leaves `link`
        whole but its .sha256 naming the file it replaced, and `load` would refuse it
        at the end of the run: link it again to the step file it is."""
        if not link.exists():
            return
        for step_file in self.directory.glob(STEP_FILE_GLOB):
            if step_file.samefile(link) and sidecar_path(step_file).is_file():
                link_atomic(step_file, link)
                return

    def uploads(self) -> dict[str, Any] | None:
        """The uploader's state for status.json; None without --checkpoint-uri."""
        return self.sync.uploads() if self.sync is not None else None

    def flush(self, timeout_s: float) -> bool:
        """Write and upload everything saved so far, synchronously; True when it all
        landed (a failed write raises)."""
        started = time.monotonic()
        self._writer.wait()
        if self.sync is None:
            return True
        done = self.sync.flush(max(0.0, timeout_s - (time.monotonic() - started)))
        waited = time.monotonic() - started
        if done:
            log.info("checkpoint: %s up to date after %.1f s", self.config.uri, waited)
        else:
            log.warning(
                "checkpoint: upload to %s not finished after %.0f s; the local copy in %s "
                "stays and is uploaded on resume",
                self.config.uri,
                waited,
                self.directory,
            )
        return done

    def close(self, timeout_s: float) -> bool:
        """Final flush (summary, report, plots too) and stop the writer and uploader."""
        try:
            done = self.flush(timeout_s)
        finally:
            self._writer.close()
        if self.sync is not None:
            self.sync.close(SYNC_STOP_SECONDS)
        return done

    def _mark_saved(self, step: int) -> None:
        self.last_saved_at = time.time()
        self._last_save_monotonic = time.monotonic()
        self._last_save_step = step
