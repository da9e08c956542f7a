"""Every way out of `train` ends here: a true status.json and a flushed outbox.

`train` hands the parts to one `RunEnding` as it builds them (the checkpoint manager,
the status writer) and ends through it: `finished` after the final evaluation,
`failed(error)` from one `except` around everything else. So a crash in the data
pipeline, in `RunOutputs`, in `finish()` or in a status write itself still leaves
status.json saying `failed` with the exit code the process will have
(`trainer.exit_codes`), and the checkpoints waiting in `.outbox` uploaded with the
metrics that say why. Nothing is uploaded before the resume has matched the run dir
to its store: a refused resume may have been pointed at another run's store.

A finished run whose final uploads do not land within their time (storage down)
says so, `finished-upload-pending`, and keeps its files on the box until
`trainer.checkpoints.final_upload` sends them (the next start of its container, or `python -m
trainer sync`).
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
from trainer.checkpoints.manager import CheckpointManager
from trainer.exit_codes import exit_code_for
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
        """After `finish()` wrote summary, report and status: the last uploads."""
        assert self.checkpoints is not None and self.status is not None
        if self.checkpoints.close(FINAL_UPLOAD_SECONDS):
            return EXIT_FINISHED
        self.status.write(state=STATE_UPLOAD_PENDING)
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
        if self.checkpoints is None or not self.store_matched:
            return
        try:
            self.checkpoints.close(FAILED_UPLOAD_SECONDS)
        except Exception as close_error:  # e.g. the failed write that ended the run
            log.warning("checkpoint: final upload after the failure failed: %s", close_error)
        self._write_status(exit_code_for(error))  # `uploads` as the close left them

    def _write_status(self, exit_code: int) -> None:
        try:
            status = self.status or StatusWriter(
                self.run_dir, self.run_id, None, fields=RunRecord.read(self.run_dir).known()
            )
            status.write(state=STATE_FAILED, exit_code=exit_code)
        except Exception as write_error:
            if exit_code_for(write_error) != EXIT_UNWRITABLE:  # else the exit line says it
                log.warning("status: cannot write %s: %s", self.run_dir / STATUS_FILE, write_error)
