"""The uploads a finished run still owes its store (status `finished-upload-pending`).

`train` says so from its summary until its last uploads landed, and ends so when
storage was down at the end or it was killed during them (`trainer.loop.run_ending`).
The run dir then holds everything: the last checkpoints, summary.json, report.md,
plots. `sync_and_mark` sends what the store lacks, in the store's order (object, record,
pointers; run files after; the run log sealed first, `trainer.checkpoints.run_log`), and
`mark_finished` marks the run `finished` once all landed, status.json the last object
stored. Two ways in: `train` itself, when its container starts again on a run dir in
that state (the box's resume unit starts such a run again), and `python -m trainer sync
--run-dir DIR --checkpoint-uri URI`. Torch-free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from box.contract import (
    BEST_CHECKPOINT,
    BOX_ROOT,
    CHECKPOINTS_DIR,
    EXIT_FINISHED,
    EXIT_STOPPED,
    RUNS_DIR,
    STATE_FINISHED,
    STATE_UPLOAD_PENDING,
    STATUS_FILE,
    RunRecord,
    run_uri,
)
from trainer.checkpoints import layout
from trainer.checkpoints.run_log import seal_run_log
from trainer.checkpoints.sync import RunSync
from trainer.checkpoints.uploader_lock import uploader_lock
from trainer.config import UserError
from trainer.reports.status import StatusWriter
from trainer.storage import ObjectNotFound, ObjectStore, StorageError, open_store

log = logging.getLogger(__name__)

SYNC_SECONDS = 300.0


def finish_pending(run_dir: Path, uri: str | None, timeout_s: float = SYNC_SECONDS) -> int | None:
    """When the run dir's status is `finished-upload-pending`: upload, mark it
    `finished` if everything landed, and return the exit code (0: the run is done
    either way, not a failure to retry). None when nothing is pending."""
    if RunRecord.read(run_dir).state != STATE_UPLOAD_PENDING or not uri:
        return None
    log.warning("the run finished before; uploading what %s still lacks", uri)
    sync_and_mark(run_dir, uri, timeout_s)
    return EXIT_FINISHED


def sync_and_mark(run_dir: Path, uri: str, timeout_s: float = SYNC_SECONDS) -> int:
    """`python -m trainer sync`: 0 when the store holds the whole run dir, 75 when storage
    did not answer or another process uploads the run dir (try again); UserError for a
    run dir that is none, a URI no store answers to, or another run's store."""
    run_dir = Path(run_dir)
    run_id = _run_id(run_dir)
    try:
        store = open_store(uri)
    except (StorageError, ImportError) as error:  # a wrong URI or a missing SDK: no retry helps
        raise UserError(f"--checkpoint-uri: {error}") from None
    with uploader_lock(run_dir, "sync"):
        try:
            # The marker of its first upload; a store from before markers: its status.json.
            owner, source = layout.read_owner(store), layout.OWNER_KEY
            if owner is None:
                owner = RunRecord.parse(_read_or_none(store, STATUS_FILE)).run_id
                source = STATUS_FILE
            stored = _Stored.read(store)
        except Exception as error:  # storage down
            log.warning("cannot reach %s (%s); try again when it answers", uri, error)
            return EXIT_STOPPED
        if owner not in (None, run_id):
            raise UserError(
                f"--checkpoint-uri {uri} holds run {owner!r} (its {source}), not "
                f"{run_id!r} of {run_dir}; nothing was uploaded: pass run {run_id!r}'s own "
                f"URI ({run_uri('<storageUri>', run_id)})"
            )
        status = RunRecord.read(run_dir)  # now: another uploader may have just marked it
        seal_run_log()  # its last line is in the copy stored
        sync = RunSync(store, run_dir).start()
        directory = run_dir / CHECKPOINTS_DIR
        newest = max((p.name for p in _step_files(directory)), default=None)
        adopted = sync.resume_outbox(directory / BEST_CHECKPOINT, newest)
        queued = len(adopted) + _queue_unpublished(sync, stored, directory, set(adopted))
        if not sync.close(timeout_s):
            log.warning("uploads to %s not finished after %.0f s; try again", uri, timeout_s)
            return EXIT_STOPPED
        log.info("%s: %d checkpoints and the run's files uploaded", uri, queued)
        if status.state == STATE_UPLOAD_PENDING:
            writer = StatusWriter(
                run_dir, str(status.run_id), None, sync.uploads, fields=status.known()
            )
            return EXIT_FINISHED if mark_finished(writer, store) else EXIT_STOPPED
        return EXIT_FINISHED


def _run_id(run_dir: Path) -> str:
    """The run id a run dir's status.json records; UserError when it is no run dir."""
    if not run_dir.is_dir():
        raise UserError(
            f"--run-dir {run_dir}: no such directory; pass the run dir `train` wrote "
            f"(on the box: {BOX_ROOT}/{RUNS_DIR}/<run_id>)"
        )
    run_id = RunRecord.read(run_dir).run_id
    if run_id is None:
        raise UserError(
            f"--run-dir {run_dir} holds no {STATUS_FILE} naming its run: not a run dir "
            "`train` wrote; pass the run's own directory"
        )
    return run_id


def _read_or_none(store: ObjectStore, key: str) -> bytes | None:
    try:
        return store.read_bytes(key)
    except ObjectNotFound:
        return None


@dataclass(frozen=True)
class _Stored:
    """What the store holds of the run's checkpoints."""

    names: frozenset[str]
    latest: str
    best: str | None

    @classmethod
    def read(cls, store: ObjectStore) -> _Stored:
        return cls(
            frozenset(layout.remote_names(store)),
            layout.read_pointer(store, layout.LATEST_KEY) or "",
            layout.read_pointer(store, layout.BEST_KEY),
        )


def _step_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("step-*.pt") if layout.is_checkpoint_name(p.name))


def _queue_unpublished(sync: RunSync, stored: _Stored, directory: Path, queued: set[str]) -> int:
    """Hand `sync` the step files the store lacks (or holds past its LATEST), oldest
    first, best.pt's as the best, bar those `queued` already; how many."""
    best = directory / BEST_CHECKPOINT
    count = 0
    for path in _step_files(directory):
        is_best = best.exists() and best.samefile(path)
        landed = path.name in stored.names and path.name <= stored.latest
        if path.name in queued or (landed and (not is_best or stored.best == path.name)):
            continue
        record = path.with_name(path.name + layout.HASH_SUFFIX)
        sync.publish_checkpoint(path, layout.parse_hash_line(record.read_text()), best=is_best)
        count += 1
    return count


def mark_finished(status: StatusWriter, store: ObjectStore) -> bool:
    """Once every other upload of a finished run landed: `finished` in the run dir, then
    in the store, its last object. False, and `finished-upload-pending` again, where the
    store did not take it."""
    status.write(state=STATE_FINISHED)
    if store_status(status, store):
        return True
    status.write(state=STATE_UPLOAD_PENDING)
    return False


def store_status(status: StatusWriter, store: ObjectStore) -> bool:
    """status.json as the run dir has it now, into the store; whether it landed."""
    try:
        store.put_file(STATUS_FILE, status.path)
    except Exception as error:  # storage down: the caller says what follows
        log.warning("%s did not reach %s (%s); try again", STATUS_FILE, store.uri, error)
        return False
    return True
