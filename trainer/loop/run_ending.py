"""Every way out of `train` ends here: a true status.json and a flushed outbox.

`train` hands the parts to one `RunEnding` as it builds them (the checkpoint manager,
the status writer) and ends through it: `finished` after the final evaluation,
`failed(error)` from one `except` around everything else. So a crash in the data
pipeline, in `RunOutputs`, in `finish()` or in a status write itself still leaves
status.json saying `failed` with the exit code the process will have
(`trainer.exit_codes`), and the checkpoints waiting in `.outbox` uploaded with the
metrics that say why. Nothing is uploaded before the resume has matched the run dir
to its store: a refused resume may have been pointed at another run's store.

A finished run says `finished` only once its last uploads landed: `finish()` writes
`finished-upload-pending` with the summary and the report, the uploads follow, and
`finished` is written and stored last. A run killed during those uploads (the OOM
killer, a `docker kill`) says `finished-upload-pending` on the box, where the resume
unit starts its container again to send the rest. Where they do not land within their
time (storage down) the status stays so, and the files wait on the box until
`trainer.checkpoints.final_upload` sends them (the next start of its container, or
`python -m trainer sync`).

Before the last uploads the run log is sealed (`trainer.checkpoints.run_log`), a
failure's message in it first: the stored train.log is the box's whole, its last line
the run's last word.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from box.contract import (
    EXIT_FINISHED,
    EXIT_UNWRITABLE,
    STATE_FAILED,
    STATE_UPLOAD_PENDING,
    STATUS_FILE,
    RunRecord,
)
from trainer.checkpoints.final_upload import mark_finished, store_status
from trainer.checkpoints.manager import CheckpointManager
from trainer.checkpoints.run_log import seal_run_log
from trainer.exit_codes import exit_code_for, exit_message
from trainer.loop.rank_outputs import Heartbeat
from trainer.reports.status import StatusWriter

log = logging.getLogger(__name__)

# The last uploads (final checkpoint, summary, report, plots) of a finished run, and
# of a failed one (its metrics say why).
FINAL_UPLOAD_SECONDS = 300.0
FAILED_UPLOAD_SECONDS = 30.0


class RunEnding:
    """What a run must leave behind however it ends; `train` fills it in as it goes."""

    def __init__(
        self, run_dir: Path, run_id: str, *, writes: bool = True, heartbeat: Heartbeat | None = None
    ) -> None:
        self.run_dir, self.run_id = Path(run_dir), run_id
        self.writes = writes
        """False on ranks other than 0: they write nothing (`trainer.loop.rank_outputs`)..."""
        self.heartbeat = heartbeat
        """... but the local rank 0 of another box: its heartbeat, failures too."""
        self.checkpoints: CheckpointManager | None = None
        self.status: StatusWriter | None = None
        self.store_matched = False
        """True once the resume accepted the store as this run's (or started fresh)."""

    def finished(self) -> int:
        """After `finish()` wrote summary, report and status (`finished-upload-pending`
        where uploads follow, else `finished`): the last uploads, then `finished`."""
        assert self.checkpoints is not None and self.status is not None
        if self.writes:
            seal_run_log()
        landed = self.checkpoints.close(FINAL_UPLOAD_SECONDS)
        store = self.checkpoints.store
        if store is None or (landed and mark_finished(self.status, store)):
            return EXIT_FINISHED
        self.status.write(state=STATE_UPLOAD_PENDING)  # `uploads` as the close left them
        log.warning(
            "the run finished but its last uploads to %s did not land; they wait in %s "
            "(status %s) until storage answers: start the run's container again, or run "
            "`python -m trainer sync --run-dir %s --checkpoint-uri %s`",
            self.checkpoints.config.uri,
            self.run_dir,
            STATE_UPLOAD_PENDING,
            self.run_dir,
            self.checkpoints.config.uri,
        )
        return EXIT_FINISHED

    def failed(self, error: BaseException) -> None:
        """Record the failure in status.json and upload what waits, never raising: the
        caller re-raises `error` itself."""
        if not self.writes:
            if self.heartbeat is not None:
                with contextlib.suppress(Exception):  # the exit code says it anyway
                    self.heartbeat.write(state=STATE_FAILED, exit_code=exit_code_for(error))
            return
        self._write_status(exit_code_for(error))
        # The message __main__ (or Python) prints once this returns: in the log first.
        seal_run_log(exit_message(error))
        if self.checkpoints is None or not self.store_matched:
            return
        try:
            landed = self.checkpoints.close(FAILED_UPLOAD_SECONDS)
        except Exception as close_error:  # e.g. the failed write that ended the run
            landed = False
            log.warning("checkpoint: final upload after the failure failed: %s", close_error)
        status = self._write_status(exit_code_for(error))  # `uploads` as the close left them
        store = self.checkpoints.store
        if landed and status is not None and store is not None:
            store_status(status, store)  # the stored copy is the box's

    def _write_status(self, exit_code: int) -> StatusWriter | None:
        """`failed` with `exit_code` in status.json; its writer, None where it failed."""
        try:
            status = self.status or StatusWriter(
                self.run_dir, self.run_id, None, fields=RunRecord.read(self.run_dir).known()
            )
            status.write(state=STATE_FAILED, exit_code=exit_code)
        except Exception as write_error:
            if exit_code_for(write_error) != EXIT_UNWRITABLE:  # else the exit line says it
                log.warning("status: cannot write %s: %s", self.run_dir / STATUS_FILE, write_error)
            return None
        return status
