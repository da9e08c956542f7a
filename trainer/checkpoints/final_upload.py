"""The uploads a finished run still owes its store (status `finished-upload-pending`).

`train` ends with that status when storage was down at the end (`trainer.loop.run_ending`).
The run dir then holds everything: the last checkpoints, summary.json, report.md,
plots. `sync_run` sends what the store lacks, in the store's order (object, record,
pointers; run files after), and `finish_pending` marks the run `finished` once all
landed. Two ways in: `train` itself, when its container starts again on a run dir
in that state (the box's resume unit starts such a run again), and
`python -m trainer sync --run-dir DIR --checkpoint-uri URI`. Torch-free.
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainer.checkpoints import layout
from trainer.checkpoints.sync import RunSync
from trainer.config import UserError
from trainer.exit_codes import EXIT_OK, EXIT_STOPPED
from trainer.reports.status import STATUS_FILE, UPLOAD_PENDING, RunRecord, StatusWriter
from trainer.storage import ObjectStore, StorageError, open_store

log = logging.getLogger(__name__)

SYNC_SECONDS = 300.0


def finish_pending(run_dir: Path, uri: str | None, timeout_s: float = SYNC_SECONDS) -> int | None:
    """When the run dir's status is `finished-upload-pending`: upload, mark it
    `finished` if everything landed, and return the exit code (0: the run is done
    either way, not a failure to retry). None when nothing is pending."""
    if RunRecord.read(run_dir).state != UPLOAD_PENDING or not uri:
        return None
    log.warning("the run finished before; uploading what %s still lacks", uri)
    sync_and_mark(run_dir, uri, timeout_s)
    return EXIT_OK


def sync_and_mark(run_dir: Path, uri: str, timeout_s: float = SYNC_SECONDS) -> int:
    """`python -m trainer sync`: 0 when the store holds the whole run dir, 75 when storage
    did not answer (try again); UserError for a URI no store answers to."""
    run_dir = Path(run_dir)
    try:
        store = open_store(uri)
    except (StorageError, ImportError) as error:  # a wrong URI or a missing SDK: no retry helps
        raise UserError(f"--checkpoint-uri: {error}") from None
    status = RunRecord.read(run_dir)
    sync = RunSync(store, run_dir).start()
    try:
        queued = _queue_unpublished(sync, store, run_dir / "checkpoints")
    except Exception as error:  # storage down: the listing failed
        log.warning("cannot list %s (%s); try again when it answers", uri, error)
        sync.close(0)
        return EXIT_STOPPED
    if not sync.close(timeout_s):
        log.warning("uploads to %s not finished after %.0f s; try again", uri, timeout_s)
        return EXIT_STOPPED
    log.info("%s: %d checkpoints and the run's files uploaded", uri, queued)
    if status.state == UPLOAD_PENDING:
        return _mark_finished(run_dir, store, status, sync)
    return EXIT_OK


def _queue_unpublished(sync: RunSync, store: ObjectStore, directory: Path) -> int:
    """Hand `sync` the step files the store lacks (or holds past its LATEST), oldest
    first, best.pt's as the best; how many."""
    stored = set(layout.remote_names(store))
    latest = layout.read_pointer(store, layout.LATEST_KEY) or ""
    stored_best = layout.read_pointer(store, layout.BEST_KEY)
    best = directory / "best.pt"
    steps = sorted(p for p in directory.glob("step-*.pt") if layout.is_checkpoint_name(p.name))
    queued = 0
    for path in steps:
        is_best = best.exists() and best.samefile(path)
        landed = path.name in stored and path.name <= latest
        if landed and (not is_best or stored_best == path.name):
            continue
        record = path.with_name(path.name + layout.HASH_SUFFIX)
        sync.publish_checkpoint(path, layout.parse_hash_line(record.read_text()), best=is_best)
        queued += 1
    return queued


def _mark_finished(run_dir: Path, store: ObjectStore, status: RunRecord, sync: RunSync) -> int:
    writer = StatusWriter(run_dir, str(status.run_id), None, sync.uploads, fields=status.known())
    writer.write(state="finished")
    try:
        store.put_file(STATUS_FILE, writer.path)
    except Exception as error:
        log.warning("%s did not reach %s (%s); try again", STATUS_FILE, store.uri, error)
        writer.write(state=UPLOAD_PENDING)
        return EXIT_STOPPED
    return EXIT_OK
