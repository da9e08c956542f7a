"""A finished run whose last uploads did not land: which of its files storage lacks.

A run's trainer says `finished` only once its last uploads landed, and
`finished-upload-pending` from its summary until then (trainer/loop/run_ending.py). A
container that exits otherwise, killed during those uploads (exit 137: the OOM killer, a
`docker kill`) or past their time with storage down (exit 0, still pending), has not
finished its uploads, and one whose status.json says `finished` with an exit other than
0 (killed between its last upload and its exit, or an image from before that order) is
not known to have. The resume unit (box/resume.py) and the end watch (box/end_watch.py)
start such a container again, and the start uploads what the store lacks
(trainer/checkpoints/final_upload.py). The box leaves the uploading to the trainer's
uploader rather than a second one of its own: the object, its record and the LATEST and
BEST pointers in their order, the outbox, the uploader's lock and the SDKs' multipart
uploads are the image's, and a copy here would be a second definition of each.

Where its starts are spent and the files still wait, the run's end is told and stored as
what it is (`store`): `finished-upload-pending`, never `failed`, with the files its
folder in storage lacks by name in its `uploads` (`missing`, contract.UPLOADS_MISSING),
over no end but a `finished-upload-pending` that named other files. Which files: those
the trainer uploads from the run dir (`expected_files`: the set `fab download` compares
with the box's copy, whose missing ones it calls "only on the box") that the store's
listing lacks. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from box import contract, docker_cli, instance_metadata, stored_end, user_files
from box.bounded_write import lines_within
from box.watchdog_config import WatchdogConfig

MISSING_STORED_AT_MOST = 1000
"""Names stored in status.json's `uploads` (contract.UPLOADS_MISSING), at most."""
NAMED_AT_MOST = 5
"""Files a message (the box's, `fab`'s) names; the rest are counted."""
FILES_AT_MOST = 100_000
"""Of a run dir walked: a container may have written any number."""
NOT_STORED_SUFFIXES = (".tmp", ".damaged")
"""Files the trainer never uploads: being written, or set aside as damaged."""
BOX_OWN = (contract.LAUNCH_FILE, contract.STOPPED_BY_USER)
"""`fab`'s: launch.json is stored by `fab train` itself, the stop marker never."""
LINKS = (contract.LAST_CHECKPOINT, contract.BEST_CHECKPOINT)
"""Under checkpoints/: links to step files, uploaded under the step files' names."""


def not_landed(
    container: docker_cli.TrainerContainer,
    run_dir: Path,
    status: contract.RunRecord | None = None,
) -> bool:
    """Whether the run of `container` (a trainer's, not a sweep's) said it finished, its
    last uploads not known to have landed (contract.RunRecord.uploads_unsettled, as
    `fab status` judges it too). Its status.json alone says so (`status`, where the
    caller read it already): a box of workers of a multi-node run, whose heartbeat says
    `finished` too, has no uploads of its own (rank 0's box uploads)."""
    if status is None:
        status = contract.RunRecord.from_dict(
            user_files.read_json(run_dir.parent, run_dir.name, contract.STATUS_FILE)
        )
    return container.kind == "train" and status.uploads_unsettled(container.exit_code)


def expected_files(run_dir: Path) -> list[str]:
    """What the trainer uploads from `run_dir`, as keys of the run's folder: what `fab
    download` compares with the box's copy (ops/tasks/transfer.py), every regular file
    but dot files and folders, NOT_STORED_SUFFIXES, BOX_OWN and checkpoints/'s LINKS
    with their records. Symlinks are never followed nor counted, nor a name with a
    control character in it (a container's prank: it would break a log's lines)."""
    found: list[str] = []
    for root, folders, names in os.walk(run_dir):
        here = Path(root)
        folders[:] = [f for f in folders if not f.startswith(".") and f.isprintable()]
        for name in names:
            if _left_out(here == run_dir / contract.CHECKPOINTS_DIR, name):
                continue
            if not os.path.islink(here / name):
                found.append((here / name).relative_to(run_dir).as_posix())
        if len(found) > FILES_AT_MOST:
            break
    return sorted(found)


def _left_out(in_checkpoints: bool, name: str) -> bool:
    if name.startswith(".") or name.endswith(NOT_STORED_SUFFIXES) or name in BOX_OWN:
        return True
    if in_checkpoints and name.startswith(LINKS):  # and their records
        return True
    return not name.isprintable()


def missing_files(config: WatchdogConfig, run_id: str, run_dir: Path, give_up: float) -> list[str]:
    """The run's files its folder in storage lacks (bar status.json), by `give_up`;
    StoreError (or MetadataError, OSError) when storage or the disk did not say."""

    def walk(report: Callable[[str], None]) -> None:
        for name in expected_files(run_dir):
            report(name)

    # In a child killed at `give_up`: a stalled disk, or a run dir of a million files.
    seconds = give_up - time.monotonic()
    walked = lines_within(walk, seconds, f"the run dir was not read within {seconds:.0f} s")
    stored = stored_end.list_keys(config, run_id, give_up)
    # status.json is the record `store` writes: it says how the run stands.
    return [n for n in walked if n not in stored and n != contract.STATUS_FILE]


def told(missing: list[str] | None, why_unknown: str, run_dir: Path) -> str:
    """What the message says the run did: finished, and which files storage lacks (or
    why that is not known)."""
    if missing is None:
        return (
            f"finished, but its last uploads did not land ({why_unknown}; they wait on the "
            f"box in {run_dir})"
        )
    if not missing:
        return contract.STATE_FINISHED
    return (
        f"finished, but {len(missing)} of its files never reached storage "
        f"({names_and_more(missing)}; they wait on the box in {run_dir})"
    )


def names_and_more(files: list[str]) -> str:
    """`a, b and 3 more`: the first NAMED_AT_MOST of `files`, the rest counted (`fab`
    says its lists so too: ops/runs/upload_pending.py)."""
    more = len(files) - NAMED_AT_MOST
    shown = ", ".join(files[:NAMED_AT_MOST])
    return f"{shown} and {more} more" if more > 0 else shown


def store(
    config: WatchdogConfig,
    container: docker_cli.TrainerContainer,
    run_dir: Path,
    last: dict,
    say: Callable[[str], None],
    give_up_at: float | None = None,
) -> tuple[bool, str]:
    """List what storage lacks of the finished run of `container`, whose uploads did not
    land, and store its end so (`last`: its status.json on the box; never `failed`), by
    `give_up_at`: (nothing left to try, what the message says it did). Never raises."""
    run_id = container.run_id
    if not config.storage_uri:  # a lab box: no identity of its own to read a bucket with
        return True, told(None, "no storage here to ask which of its files it lacks", run_dir)
    give_up = give_up_at if give_up_at is not None else time.monotonic() + stored_end.STORE_SECONDS
    try:
        missing = missing_files(config, run_id, run_dir, give_up)
    except (stored_end.StoreError, instance_metadata.MetadataError, OSError) as error:
        say(f"WARNING: run {run_id}: which files storage lacks is not known ({error}); next look")
        return False, told(
            None, f"storage did not say which of its files it lacks: {error}", run_dir
        )
    said = told(missing, "", run_dir)
    if not missing:  # landed after all (a start of its own, a `trainer sync`)
        return True, said
    say(f"run {run_id} {said}")
    uploads = last.get("uploads") if isinstance(last.get("uploads"), dict) else {}
    record = {
        **last,
        "run_id": run_id,
        "state": contract.STATE_UPLOAD_PENDING,
        "exit_code": container.exit_code,
        "updated_at": container.finished_at,
        "uploads": {**uploads, contract.UPLOADS_MISSING: missing[:MISSING_STORED_AT_MOST]},
    }
    kept = _keeps_unless_other_files(missing[:MISSING_STORED_AT_MOST])
    return stored_end.store(config, run_id, record, say, give_up, keeps=kept), said


def _keeps_unless_other_files(missing: list[str]) -> stored_end.Keeps:
    """Kept: any end but a `finished-upload-pending` that names other files (the
    trainer's, stored as its last uploads began, names none)."""

    def keeps(stored: bytes) -> str | None:
        record = stored_end.stored_record(stored)
        if record.state not in contract.END_STATES:
            return None
        if record.state == contract.STATE_UPLOAD_PENDING and record.missing_uploads() != missing:
            return None
        return record.state

    return keeps
