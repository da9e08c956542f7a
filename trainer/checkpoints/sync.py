"""Background upload of a run to its store: checkpoints first, then a mirror.

Training never waits on the network: `publish_checkpoint` and `request_mirror`
only record work for one worker thread. The worker uploads each checkpoint in the
order of `trainer.checkpoints.layout` (object, hash, then the LATEST/BEST pointers),
keeps the last K remotely, and every `mirror_every_seconds` copies the run dir's
changed files (metrics.jsonl, status.json, summary.json, tb/, plots/, report.md...).

When storage is down the worker logs one warning, keeps the work and retries with
exponential backoff (capped); when storage returns it catches up. The work is
bounded: a checkpoint superseded while still waiting is dropped (the newer one
holds everything it held), so an outage never grows the backlog. `flush` is the
synchronous path for preemption: it waits until everything recorded is uploaded.

What waits lives in the checkpoint dir's `.outbox/` (a hard link to each checkpoint
and its `.sha256` record), so it outlives the process: the checkpoint manager may
prune a step file that never reached the store (a best saved during an outage), and
a run killed or stopped before the store came back finds it there on its next start
(`resume_outbox`): a restart loses nothing that waited. The caller holds the run
dir's uploader lock (`trainer.checkpoints.uploader_lock`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from box.contract import CHECKPOINTS_DIR, STOPPED_BY_USER
from trainer.atomic_write import fsync_dir, temp_path, write_bytes_atomic
from trainer.checkpoints import layout
from trainer.checkpoints.thread_priority import lower_thread_priority
from trainer.storage import ObjectStore

log = logging.getLogger(__name__)

OUTBOX_DIR_NAME = ".outbox"
WORKER_JOIN_SECONDS = 10.0
# Written by `fab stop` for this box's resume unit (ARCHITECTURE.md): restored on
# another box from the store, it would keep that box's run from resuming.
BOX_MARKERS = (STOPPED_BY_USER,)


@dataclass(frozen=True)
class SyncConfig:
    """How the uploader paces itself."""

    mirror_every_seconds: float = 30.0
    """Copy changed run files at most this often (checkpoints go at once)."""
    keep_last: int = 3
    """Checkpoints kept in the store besides BEST."""
    retry_initial_seconds: float = 1.0
    """First wait after a failed upload; doubles per failure."""
    retry_max_seconds: float = 30.0
    """Cap on that wait: storage that comes back is noticed within this long."""

    def __post_init__(self) -> None:
        if self.mirror_every_seconds <= 0:
            raise ValueError(f"mirror_every_seconds must be > 0, got {self.mirror_every_seconds}")
        if self.keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {self.keep_last}")
        if not 0 < self.retry_initial_seconds <= self.retry_max_seconds:
            raise ValueError(
                "need 0 < retry_initial_seconds <= retry_max_seconds, got "
                f"{self.retry_initial_seconds} and {self.retry_max_seconds}"
            )


@dataclass(frozen=True)
class _Checkpoint:
    name: str
    staged: Path
    sha256: str
    best: bool


@dataclass
class SyncStatus:
    """What the uploader has done, for status.json (`uploads`) and its log lines."""

    pending_checkpoints: int = 0
    last_uploaded_at: float | None = None
    failing_since: float | None = None


@dataclass
class _State:
    pending: dict[str, _Checkpoint] = field(default_factory=dict)
    # Mirror passes asked for and done, as counters: a request made while a pass
    # is running must get a pass of its own (the running one may have missed it).
    mirrors_wanted: int = 0
    mirrors_done: int = 0
    busy: bool = False
    current: _Checkpoint | None = None
    stopping: bool = False
    urgent: bool = False


class RunSync:
    """Uploads one run dir to one store from a background thread."""

    def __init__(self, store: ObjectStore, run_dir: Path, config: SyncConfig | None = None):
        self.store = store
        self.run_dir = Path(run_dir)
        self.config = config or SyncConfig()
        self.status = SyncStatus()
        self._state = _State()
        self._cond = threading.Condition()
        self._mirrored: dict[str, tuple[int, int]] = {}
        self._uploaded_names: list[str] = []
        self._best: str | None = None
        self._claimed = False
        self._thread = threading.Thread(target=self._run, name="checkpoint-sync", daemon=True)

    # -- the training thread's side -------------------------------------------------

    def start(self) -> RunSync:
        self._thread.start()
        return self

    def publish_checkpoint(self, path: Path, sha256: str, *, best: bool = False) -> None:
        """Queue a finished checkpoint file (named e.g. step-000001200-epoch-0003.pt) for upload.

        The file is hard-linked into the outbox first, so the checkpoint manager may
        rotate or delete its own copy while the upload is still running.
        """
        path = Path(path)
        self._queue(_Checkpoint(path.name, _stage(path, sha256), sha256, best))

    def resume_outbox(self, best: Path, upto: str | None) -> list[str]:
        """Queue again what an earlier process left waiting in the outbox (it was killed,
        or stopped while storage was down): its checkpoints up to `upto`, the one the
        run goes on from, that still match their records; the one `best` links to is
        the best. Those after `upto` (all of them when None: a fresh start, or one from
        the store's newer checkpoint) are not part of the run going on: dropped, with a
        warning. Returns the names queued."""
        outbox = self.run_dir / CHECKPOINTS_DIR / OUTBOX_DIR_NAME
        if not outbox.is_dir():
            return []
        queued, dropped = [], []
        for staged in sorted(outbox.iterdir()):
            if not layout.is_checkpoint_name(staged.name):
                continue
            if upto is None or staged.name > upto:
                dropped.append(staged.name)
            elif (sha256 := _verified(staged)) is not None:
                is_best = best.exists() and best.samefile(staged)
                self._queue(_Checkpoint(staged.name, staged, sha256, is_best))
                queued.append(staged.name)
        for other in outbox.iterdir():  # the dropped, the damaged, stray records, temp files
            if other.name.removesuffix(layout.HASH_SUFFIX) not in queued:
                other.unlink(missing_ok=True)
        if dropped:
            log.warning(
                "upload: dropped %s from %s: not part of the run going on from %s",
                ", ".join(dropped),
                outbox,
                upto or "the start",
            )
        return queued

    def _queue(self, checkpoint: _Checkpoint) -> None:
        with self._cond:
            pending = self._state.pending
            pending[checkpoint.name] = checkpoint
            for dropped in _superseded(pending, self.config.keep_last):
                del pending[dropped.name]
                if dropped is not self._state.current:  # else the worker unlinks it
                    _unstage(dropped.staged)
            self.status.pending_checkpoints = len(pending)
            self._cond.notify_all()

    def request_mirror(self) -> None:
        """Ask for a mirror pass now (e.g. after summary.json or plots were written)."""
        with self._cond:
            self._state.mirrors_wanted += 1
            self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Upload everything recorded so far plus a mirror pass; True when all landed."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._state.mirrors_wanted += 1
            self._state.urgent = True
            self._cond.notify_all()
            while not self._idle():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(remaining)
            return True

    def close(self, timeout_s: float) -> bool:
        """Flush, then stop the worker; True when everything was uploaded."""
        done = self.flush(timeout_s)
        with self._cond:
            self._state.stopping = True
            self._cond.notify_all()
        self._thread.join(WORKER_JOIN_SECONDS)
        return done

    def uploads(self) -> dict[str, Any]:
        """status.json's `uploads`: checkpoints waiting, since when uploads fail (unix s,
        None while they work) and when a checkpoint last landed."""
        with self._cond:
            return {
                "pending": self.status.pending_checkpoints,
                "failing_since": self.status.failing_since,
                "last_uploaded_at": self.status.last_uploaded_at,
            }

    def _idle(self) -> bool:
        state = self._state
        return not (state.pending or state.mirrors_wanted > state.mirrors_done or state.busy)

    # -- the worker -------------------------------------------------------------------

    def _run(self) -> None:
        # Uploads wait rather than steps; the SDK's transfer threads inherit this.
        lower_thread_priority()
        backoff_s = self.config.retry_initial_seconds
        next_mirror = time.monotonic() + self.config.mirror_every_seconds
        retry_at = 0.0
        while True:
            with self._cond:
                while True:
                    state = self._state
                    if state.urgent:
                        state.urgent, retry_at = False, 0.0
                        backoff_s = self.config.retry_initial_seconds
                    now = time.monotonic()
                    if now >= next_mirror and state.mirrors_wanted == state.mirrors_done:
                        state.mirrors_wanted += 1
                    has_work = bool(state.pending) or state.mirrors_wanted > state.mirrors_done
                    if state.stopping and (not has_work or now < retry_at):
                        return
                    if has_work and now >= retry_at:
                        break
                    wake_at = retry_at if has_work else next_mirror
                    self._cond.wait(max(0.0, wake_at - now))
                state.busy = True
                job = state.current = self._next_checkpoint()
                mirror_ticket = state.mirrors_wanted
            try:
                if not self._claimed:  # with the first upload: the store is this run's
                    layout.claim(self.store, self.run_dir.resolve().name)
                    self._claimed = True
                if job is not None:
                    self._upload(job)
                else:
                    self._mirror_pass()
                    next_mirror = time.monotonic() + self.config.mirror_every_seconds
            except Exception as error:  # every failure is retried: storage may come back
                self._failed(error, backoff_s)
                retry_at = time.monotonic() + backoff_s
                backoff_s = min(backoff_s * 2, self.config.retry_max_seconds)
                self._done(job, None, uploaded=False)
                continue
            backoff_s = self.config.retry_initial_seconds
            retry_at = 0.0
            self._recovered()
            self._done(job, None if job else mirror_ticket, uploaded=True)

    def _next_checkpoint(self) -> _Checkpoint | None:
        pending = self._state.pending
        return pending[min(pending)] if pending else None

    def _done(self, job: _Checkpoint | None, mirrored_ticket: int | None, *, uploaded: bool):
        with self._cond:
            state = self._state
            state.current = None
            if job is not None:
                waiting = state.pending.get(job.name)
                if uploaded and waiting is job:
                    del state.pending[job.name]
                    waiting = None
                if waiting is None:  # done, or dropped meanwhile; not published anew
                    _unstage(job.staged)
            if mirrored_ticket is not None:
                state.mirrors_done = max(state.mirrors_done, mirrored_ticket)
            state.busy = False
            self.status.pending_checkpoints = len(state.pending)
            self._cond.notify_all()

    def _upload(self, job: _Checkpoint) -> None:
        layout.upload_checkpoint(self.store, job.name, job.staged, job.sha256)
        if job.best:
            layout.set_pointer(self.store, layout.BEST_KEY, job.name)
            self._best = job.name
        layout.advance_latest(self.store, job.name)
        if job.name not in self._uploaded_names:
            self._uploaded_names.append(job.name)
        self.status.last_uploaded_at = time.time()
        self._prune()

    def _prune(self) -> None:
        """Keep the last K this uploader sent, LATEST (an older one sent late leaves it
        where it was) and BEST; early in a resumed run, the newest at or before LATEST
        count towards K. The rest go, names past LATEST too: no run's, as LATEST moves
        after every upload."""
        resumable = layout.candidates(self.store)  # LATEST, then the older ones
        keep = set(self._uploaded_names[-self.config.keep_last :]) | set(resumable[:1])
        keep.add(self._best or layout.read_pointer(self.store, layout.BEST_KEY) or "")
        missing = self.config.keep_last - len(self._uploaded_names)
        keep.update([name for name in resumable if name not in keep][: max(0, missing)])
        layout.prune(self.store, keep)

    def _mirror_pass(self) -> None:
        for path in _run_files(self.run_dir):
            relative = path.relative_to(self.run_dir).as_posix()
            try:
                stat = path.lstat()
            except FileNotFoundError:  # replaced or removed since the scan
                continue
            if not S_ISREG(stat.st_mode):  # turned into a symlink since the scan
                continue
            signature = (stat.st_size, stat.st_mtime_ns)
            if self._mirrored.get(relative) == signature:
                continue
            self.store.put_file(relative, path)
            self._mirrored[relative] = signature

    def _failed(self, error: Exception, backoff_s: float) -> None:
        if self.status.failing_since is None:  # one warning per outage, not per retry
            self.status.failing_since = time.time()
            message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            log.warning(
                "upload to %s failed (%s); training goes on, uploads are kept and "
                "retried every %.0f-%.0f s",
                self.store.uri,
                message,
                backoff_s,
                self.config.retry_max_seconds,
            )

    def _recovered(self) -> None:
        if self.status.failing_since is not None:
            down_s = time.time() - self.status.failing_since
            log.warning("upload to %s works again after %.0f s; caught up", self.store.uri, down_s)
            self.status.failing_since = None


def _stage(path: Path, sha256: str) -> Path:
    """A private name for the file's current content (a hard link; a copy if need be)
    in the outbox, its record first: a staged checkpoint never lacks one."""
    outbox = path.parent / OUTBOX_DIR_NAME
    outbox.mkdir(exist_ok=True)
    staged = outbox / path.name
    staged.unlink(missing_ok=True)
    write_bytes_atomic(_record_of(staged), layout.hash_line(sha256, path.name).encode())
    try:
        os.link(path, staged)
    except OSError:  # a file system without hard links: a whole copy, or none
        shutil.copyfile(path, temp_path(staged))
        os.replace(temp_path(staged), staged)
    fsync_dir(outbox)  # it may be the only copy once the manager prunes the step file
    return staged


def _unstage(staged: Path) -> None:
    staged.unlink(missing_ok=True)
    _record_of(staged).unlink(missing_ok=True)


def _record_of(staged: Path) -> Path:
    return staged.with_name(staged.name + layout.HASH_SUFFIX)


def _verified(staged: Path) -> str | None:
    """The staged file's sha256 when it matches its record, else None (warned)."""
    try:
        expected = layout.parse_hash_line(_record_of(staged).read_text())
    except (OSError, ValueError) as error:
        log.warning("upload: %s has no usable record (%s)", staged, error)
        return None
    actual = layout.sha256_of(staged)
    if actual != expected:
        log.warning("upload: %s: sha256 %s != recorded %s", staged, actual[:12], expected[:12])
        return None
    return actual


def _superseded(pending: dict[str, _Checkpoint], keep_last: int) -> list[_Checkpoint]:
    """Waiting checkpoints no longer worth uploading: beyond the newest K, bar the best."""
    names = sorted(pending)
    newest_best = max((n for n in names if pending[n].best), default=None)
    return [pending[n] for n in names[:-keep_last] if n != newest_best]


def _run_files(run_dir: Path) -> list[Path]:
    """Files to mirror: everything but checkpoints (uploaded on their own), temp files,
    the box's control markers and symlinks (one could point anywhere on the box: the
    credentials of its user, say; the store would publish whatever it reads)."""
    if not run_dir.is_dir():
        return []
    files = []
    for root, dirs, names in os.walk(run_dir):
        top = Path(root) == run_dir
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (top and d == CHECKPOINTS_DIR)]
        files.extend(
            Path(root) / n
            for n in names
            if not (n.startswith(".") or n.endswith(".tmp") or (top and n in BOX_MARKERS))
            and not os.path.islink(Path(root) / n)
        )
    return sorted(files)
