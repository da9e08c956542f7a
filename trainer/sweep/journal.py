"""The sweep's Optuna journal (its queue and every trial's values) kept readable.

Optuna appends one JSON line per change and, reading, stops with JSONDecodeError at a
line that is not whole once another follows it. An append cut short (a full disk, a
box that died mid-write) leaves half a line that the next append joins, and every
later start of the sweep would fail. So before the study opens, the journal is cut
back to its last whole line (what was cut is kept beside it, `.torn`), and a verified
copy (every line whole JSON) is refreshed at each look of the driver: a journal that
lost more than a torn tail comes back from that copy. On a box that has none of it (a
replaced box), the journal the mirror stored is fetched first, so the sweep resumes
where it was instead of starting a new study over the stored one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from trainer.atomic_write import write_bytes_atomic
from trainer.config import UserError
from trainer.sweep.mirror import sweep_uri
from trainer.sweep.spec import JOURNAL_FILE, SPEC_FILE, SweepSpec

log = logging.getLogger(__name__)

VERIFIED_FILE = f"{JOURNAL_FILE}.verified"
TORN_SUFFIX = ".torn"


def whole_lines(data: bytes) -> bytes:
    """The longest start of `data` made of whole lines that each hold a JSON object."""
    kept = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            break
        if not isinstance(record, dict):
            break
        kept += len(line)
    return data[:kept]


def prepare(spec: SweepSpec, sweep_dir: Path) -> Path:
    """The journal's path, made safe for Optuna to open: fetched from storage where the
    box has none, cut back to its whole lines, or restored from the verified copy."""
    path = sweep_dir / JOURNAL_FILE
    if not path.exists():
        _fetch_stored(spec, path)
    data = path.read_bytes() if path.exists() else b""
    good = whole_lines(data)
    verified = _read(sweep_dir / VERIFIED_FILE)
    if len(verified) > len(good) and verified.startswith(good):
        log.warning("sweep: %s lost lines its verified copy has; restored from it", path)
        good = verified
    if good != data:
        if data[len(good) :] and not data.startswith(good):
            log.warning("sweep: %s does not start as its verified copy; restored", path)
        (path.parent / (path.name + TORN_SUFFIX)).write_bytes(data)
        write_bytes_atomic(path, good)
        log.warning(
            "sweep: %s had %d byte(s) past its last whole line (an append cut short); "
            "cut back, the cut bytes kept in %s%s",
            path,
            len(data) - len(good),
            path.name,
            TORN_SUFFIX,
        )
    return path


def keep_verified(sweep_dir: Path) -> None:
    """Refresh the verified copy when the journal grew and every line of it is whole."""
    path, copy = sweep_dir / JOURNAL_FILE, sweep_dir / VERIFIED_FILE
    data = _read(path)
    if len(data) <= _size(copy) or whole_lines(data) != data:
        return
    try:
        write_bytes_atomic(copy, data)
    except OSError as error:  # a full disk: the copy it has stays the verified one
        log.warning("sweep: verified copy of the journal not refreshed: %s", error)


def _fetch_stored(spec: SweepSpec, path: Path) -> None:
    from trainer.storage import ObjectNotFound, open_store

    try:
        store = open_store(sweep_uri(spec.storage_uri, spec.sweep_id))
        _refuse_another_study(spec, store)
        stored = store.read_bytes(JOURNAL_FILE)
    except ObjectNotFound:
        return
    except Exception as error:  # storage down: a new study would overwrite the stored one
        raise UserError(
            f"sweep {spec.sweep_id}: this box has no journal and the stored one could not be "
            f"read ({error}); start the sweep again once storage answers"
        ) from error
    log.warning("sweep: %s fetched from storage (this box had none)", path)
    write_bytes_atomic(path, stored)


def _refuse_another_study(spec: SweepSpec, store) -> None:
    """UserError when storage's sweep of this id searched something else: its journal is
    another study, which this sweep would adopt and train none of its own values."""
    from trainer.storage import ObjectNotFound

    try:
        stored = SweepSpec.from_json(store.read_bytes(SPEC_FILE).decode(errors="replace"))
    except (ObjectNotFound, UserError):
        return  # none stored (a sweep older than its mirror), or torn: the journal decides
    if not stored.same_study(spec):
        raise UserError(
            f"sweep id {spec.sweep_id} is taken: storage holds an earlier {stored.described()}; "
            "a new sweep needs a new id (leave --sweep out for one)"
        )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
