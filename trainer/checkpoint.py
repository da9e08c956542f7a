"""Checkpoints: one dict with fixed keys, written atomically, verified by sha256.

`save` streams the serialisation into a temp file in the target's directory,
hashing it on the way (one pass, no in-memory copy, no reading back), fsyncs it,
renames it over the target and fsyncs the directory, so a crash at any moment
leaves either the old or the new file, never half of one; a `<name>.sha256` sidecar
(sha256sum format) lets `load` refuse a damaged file. `load` uses
`torch.load(weights_only=True)`: a checkpoint from a bucket must not be able to run
code.

On disk (`<run_dir>/checkpoints/`): `step-<step>-epoch-<epoch>.pt` for the last K
saves, and `last.pt` / `best.pt` as hard links to the newest and the best of them.
Names sort in training order, locally and in the store (`trainer.remote_checkpoints`).

`CheckpointManager` is the one object `train.py` talks to: when to save, the files,
the newest valid state to resume from (local or at `--checkpoint-uri`, see
`trainer.resume`) and the background upload (`trainer.sync`). A save blocks the loop
only for a snapshot of the state; the write, the links, pruning and handing the file
to the uploader follow in that order on a writer thread (`trainer.checkpoint_writer`).
`flush`, `close` and `load_best` wait for it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import torch

from trainer import remote_checkpoints as layout
from trainer.atomic_write import (
    fsync_dir,
    fsync_file,
    open_atomic,
    temp_path,
    write_bytes_atomic,
)
from trainer.checkpoint_writer import BackgroundWriter, snapshot
from trainer.config import UserError
from trainer.storage import InvalidStorageUri, ObjectStore, StorageError, open_store
from trainer.sync import RunSync, SyncConfig

if TYPE_CHECKING:
    from trainer.resume import Check

log = logging.getLogger(__name__)

STATE_KEYS = (
    "model",
    "optimizer",
    "scheduler",
    "scaler",
    "step",
    "epoch",
    "step_in_epoch",
    "rng",
    "config",
    "label_norm",
    "input_norm",
    "splits",
    "best_val_mae",
    "epochs_without_improvement",
    "dataset_fingerprint",
)
STEP_FILE_GLOB = "step-*.pt"
# Run files on disk before each checkpoint is: a resume from it, after a power cut,
# finds every metrics record up to its step (the loop writes them before it saves).
DURABLE_WITH_CHECKPOINTS = ("metrics.jsonl",)
SYNC_STOP_SECONDS = 1.0
DAMAGED_SUFFIX = ".damaged"


class CheckpointError(Exception):
    """A checkpoint file is missing, damaged (sha256 mismatch) or not a checkpoint."""


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


def checkpoint_name(state: dict[str, Any]) -> str:
    """Sorts in training order: the same step is saved again after its epoch's validation."""
    return f"step-{int(state['step']):09d}-epoch-{int(state['epoch']):04d}.pt"


def sidecar_path(path: Path) -> Path:
    """Where the `.sha256` record of checkpoint `path` lives."""
    return path.with_name(path.name + layout.HASH_SUFFIX)


def write_sidecar(path: Path, digest: str) -> None:
    record = layout.hash_line(digest, path.name).encode()
    write_bytes_atomic(sidecar_path(path), record, durable=True)


class _HashingWriter:
    """Passes torch.save's writes to a file, hashing them on the way."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.sha256 = hashlib.sha256()
        self.error: OSError | None = None
        """The file's own error: torch reports a failed write as a RuntimeError."""

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        try:
            return self._handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self._handle.flush()


def save(path: Path, state: dict[str, Any]) -> str:
    """Write `state` to `path` atomically with a `.sha256` sidecar; return the digest."""
    missing = [key for key in STATE_KEYS if key not in state]
    assert not missing, f"checkpoint state lacks {missing}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(path, durable=True) as handle:
        writer = _HashingWriter(handle)
        try:
            torch.save(state, writer)
        except RuntimeError:
            if writer.error is not None:  # e.g. ENOSPC: say that, not torch's wrapper
                error = writer.error
                raise OSError(error.errno, error.strerror, str(path)) from None
            raise
        digest = writer.sha256.hexdigest()
        # The record before the file: a step file never exists without one (resuming
        # from it links last.pt, which copies its record), while a kill between the
        # two leaves only a stray record, which nothing reads without its file.
        write_sidecar(path, digest)
    return digest


def load(path: Path, *, require_record: bool = False) -> dict[str, Any]:
    """Verify the sidecar digest (when present; `require_record`: it must be) and load
    with weights_only=True; CheckpointError unless it holds a trainer checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    sidecar = sidecar_path(path)
    if require_record and not sidecar.is_file():
        raise CheckpointError(f"{path}: no {sidecar.name} record (not written by the trainer)")
    if sidecar.is_file():
        try:
            expected = layout.parse_hash_line(sidecar.read_text())
        except ValueError as error:
            raise CheckpointError(f"{path}: unreadable sha256 record ({error})") from None
        if (actual := layout.sha256_of(path)) != expected:
            raise CheckpointError(f"{path}: sha256 {actual[:12]} != recorded {expected[:12]}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises a zoo of types for a truncated/foreign file
        raise CheckpointError(f"{path}: not loadable ({type(error).__name__}: {error})") from None
    if (problem := _structure_problem(state)) is not None:
        raise CheckpointError(f"{path}: not a trainer checkpoint ({problem})")
    return state


def _structure_problem(state: Any) -> str | None:
    """What makes `state` something other than a dict of `STATE_KEYS` of the right kinds."""
    if not isinstance(state, dict):
        return f"a {type(state).__name__}, not a dict"
    if missing := [key for key in STATE_KEYS if key not in state]:
        return f"no {', '.join(missing)}"
    for key in ("step", "epoch", "step_in_epoch", "epochs_without_improvement"):
        if type(state[key]) is not int or state[key] < 0:
            return f"{key} is {state[key]!r}, not a count"
    for key in ("model", "optimizer", "config", "label_norm", "input_norm", "splits"):
        if not isinstance(state[key], dict):
            return f"{key} is a {type(state[key]).__name__}, not a dict"
    return None


def link_atomic(source: Path, target: Path) -> None:
    """Make `target` name `source`'s content (a hard link; a copy where links fail)."""
    if not (target.exists() and target.samefile(source)):
        tmp = temp_path(target)
        tmp.unlink(missing_ok=True)
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        # rename(2) of one hard link over another of the same file does nothing and
        # leaves the temp name: hence the test above, and the unlink for a race.
        os.replace(tmp, target)
        tmp.unlink(missing_ok=True)
    write_sidecar(target, layout.parse_hash_line(sidecar_path(source).read_text()))
    fsync_dir(target.parent)


def open_run_store(uri: str) -> ObjectStore:
    """The store for `--checkpoint-uri`, or a one-line UserError."""
    try:
        return open_store(uri)
    except (InvalidStorageUri, StorageError, ImportError) as error:
        raise UserError(f"--checkpoint-uri: {error}") from None


def resolve_local(path_or_uri: str) -> Path:
    """A checkpoint argument as a local path, fetching (and verifying) a remote one.

    Remote forms: a run's URI (its BEST checkpoint, else LATEST) or
    `<run URI>/checkpoints/<name>.pt`.
    """
    if path_or_uri.startswith("file://") and path_or_uri.endswith(".pt"):
        return Path(path_or_uri[len("file://") :])
    if "://" not in path_or_uri:
        return Path(path_or_uri)
    run_uri, name = path_or_uri.rstrip("/"), None
    if run_uri.endswith(".pt"):
        run_uri, _, name = run_uri.rpartition("/" + layout.CHECKPOINTS_PREFIX)
    store = open_run_store(run_uri)
    name = (
        name
        or layout.read_pointer(store, layout.BEST_KEY)
        or layout.read_pointer(store, layout.LATEST_KEY)
    )
    if not name:
        raise UserError(f"--checkpoint {path_or_uri}: no BEST or LATEST checkpoint there")
    if not layout.is_checkpoint_name(name):
        raise UserError(
            f"--checkpoint {path_or_uri}: {name!r} is not a checkpoint name "
            "(step-NNNNNNNNN-epoch-NNNN.pt)"
        )
    # A directory of its own: runs share step names, so a shared cache could mix them.
    dest = Path(tempfile.mkdtemp(prefix="glucose-checkpoint-")) / name
    digest = layout.download_verified(store, name, dest)
    if digest is None:
        raise UserError(f"--checkpoint {path_or_uri}: {name} is missing or fails its sha256")
    write_sidecar(dest, digest)
    return dest


class CheckpointManager:
    """When to save, where (step files, `last.pt`, `best.pt`), upload, and resume."""

    def __init__(self, config: CheckpointConfig) -> None:
        self.config = config
        self.directory = Path(config.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.last_path = self.directory / "last.pt"
        self.best_path = self.directory / "best.pt"
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
        """The checkpoint to resume from, here or in the store (`trainer.resume`), or
        None for a fresh run; `check` says why a state cannot continue this run."""
        from trainer.resume import find_newest

        found = find_newest(self.directory, self.store, check)
        if found is None:
            return None
        self._newest = found.path
        if found.path.name.startswith("step-"):
            link_atomic(found.path, self.last_path)
        self._mend_record(self.best_path)
        if self.sync is not None and not found.in_store:
            # Killed before its upload finished: send it now.
            self.sync.publish_checkpoint(found.path, layout.sha256_of(found.path))
            self._published.add(found.path.name)
        self._mark_saved(int(found.state["step"]))
        return found.state

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


def capture_rng() -> dict[str, Any]:
    """Every RNG the loop may touch, as types torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": list(random.getstate()),
    }


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
