"""Find the newest valid checkpoint among the run dir and the run's store.

Candidates are the step files on both sides, newest name first (names sort in
training order); a local file is tried before the store's copy of the same name.
Each one must match its sha256 and load with `weights_only=True`; one that does
not is skipped with a warning (a damaged local file is renamed `*.damaged`, kept
for inspection, never deleted) and the previous one is tried. `last.pt` and
`best.pt` are the last resort, for run dirs written before step files existed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import remote_checkpoints as layout
from trainer.checkpoint import (
    DAMAGED_SUFFIX,
    STEP_FILE_GLOB,
    CheckpointError,
    link_atomic,
    load,
    sidecar_path,
    write_sidecar,
)
from trainer.config import UserError
from trainer.storage import ObjectStore

log = logging.getLogger(__name__)

# With nothing local, starting fresh would overwrite the store's LATEST: wait for
# storage this long (an outage at start-up), then refuse rather than guess.
STORE_WAIT_SECONDS = 60.0
STORE_RETRY_MAX_SECONDS = 10.0


@dataclass(frozen=True)
class Found:
    path: Path
    state: dict[str, Any]
    in_store: bool
    """False: the store lacks it (killed before the upload), so it must be sent."""


def find_newest(directory: Path, store: ObjectStore | None) -> Found | None:
    """The newest checkpoint that verifies and loads, or None for a fresh run."""
    local = {path.name: path for path in directory.glob(STEP_FILE_GLOB)}
    remote = set(_remote_names(store, have_local=bool(local))) if store is not None else set()
    for name in sorted(set(local) | remote, reverse=True):
        if name in local and (state := _try_load(local[name])) is not None:
            found = Found(local[name], state, name in remote)
        elif name in remote and (path := _fetch(store, name, directory)) is not None:
            state = _try_load(path)
            if state is None:
                continue
            log.warning("checkpoint: resuming from %s, fetched from the store", name)
            _restore_run_files(directory.parent, store)
            found = Found(path, state, True)
        else:
            continue
        if store is not None:
            _fetch_best(directory, store)
        return found
    for fallback in (directory / "last.pt", directory / "best.pt"):
        if fallback.exists() and (state := _try_load(fallback)) is not None:
            return Found(fallback, state, True)
    return None


def _try_load(path: Path) -> dict[str, Any] | None:
    try:
        return load(path)
    except CheckpointError as error:
        log.warning("checkpoint: skipping damaged %s; trying the previous one", error)
    if path.name.startswith("step-"):
        for damaged in (path, sidecar_path(path)):
            if damaged.exists():
                damaged.replace(damaged.with_name(damaged.name + DAMAGED_SUFFIX))
    return None


def _remote_names(store: ObjectStore, *, have_local: bool) -> list[str]:
    deadline = time.monotonic() + STORE_WAIT_SECONDS
    delay_s = 1.0
    while True:
        try:
            return layout.remote_names(store)
        except Exception as error:  # any SDK error: the store is unreachable or refusing
            message = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        if have_local:
            log.warning(
                "checkpoint: cannot list %s (%s); resuming from the run dir", store.uri, message
            )
            return []
        if time.monotonic() + delay_s > deadline:
            raise UserError(
                f"--checkpoint-uri {store.uri}: cannot list its checkpoints ({message}); "
                "fix the credentials or endpoint and run again (starting fresh could "
                "overwrite a run stored there)"
            )
        log.warning("checkpoint: cannot list %s (%s); retrying", store.uri, message)
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, STORE_RETRY_MAX_SECONDS)


def _fetch(store: ObjectStore, name: str, directory: Path) -> Path | None:
    """Download `name` into the run dir, verified against its recorded sha256."""
    path = directory / name
    try:
        digest = layout.download_verified(store, name, path)
    except Exception as error:  # an outage mid-download: try the next candidate
        log.warning("checkpoint: fetching %s from %s failed: %s", name, store.uri, error)
        return None
    if digest is None:
        return None
    write_sidecar(path, digest)
    return path


def _restore_run_files(run_dir: Path, store: ObjectStore) -> None:
    """A new box resuming from the store gets the run's history back (metrics.jsonl,
    tb/, ...) before it logs more: its mirror would otherwise replace the stored
    history with the part after the resume."""
    try:
        keys = [key for key in store.list() if not key.startswith(layout.CHECKPOINTS_PREFIX)]
        missing = [key for key in keys if not (run_dir / key).exists()]
        for key in missing:
            store.get_file(key, run_dir / key)
    except Exception as error:  # history is worth a warning, not a refusal to train
        log.warning("checkpoint: could not restore run files from %s: %s", store.uri, error)
        return
    if missing:
        log.warning("checkpoint: restored %d run files from %s", len(missing), store.uri)


def _fetch_best(directory: Path, store: ObjectStore) -> None:
    """An empty run dir resumed from the store needs `best.pt` for the final report."""
    best = directory / "best.pt"
    if best.exists():
        return
    try:
        name = layout.read_pointer(store, layout.BEST_KEY)
    except Exception as error:
        log.warning("checkpoint: cannot read BEST at %s: %s", store.uri, error)
        return
    if not name:
        return
    path = directory / name if (directory / name).exists() else _fetch(store, name, directory)
    if path is not None:
        link_atomic(path, best)
