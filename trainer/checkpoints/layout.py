"""The layout of checkpoints in a store, and reading it back safely.

Under a run's URI (``<storageUri>/runs/<run_id>``, see ARCHITECTURE.md)::

    checkpoints/<name>             the checkpoint, e.g. step-000001200-epoch-0003.pt
    checkpoints/<name>.sha256      "<hex>  <name>" (the format of `sha256sum`)
    checkpoints/LATEST             the name of the newest complete checkpoint
    checkpoints/BEST               the name of the best one so far

A writer puts ``<name>``, then ``<name>.sha256``, then the pointers: a single-object
write is atomic on every backend, so a pointer never names an object that is not
all there, and a reader that checks the hash never takes a damaged or half-replaced
object for a good one. LATEST never moves back (`advance_latest`): an older
checkpoint uploaded late, a best that waited out an outage, lands beside it.
Torch-free: `fab download` reads the same layout.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from box.contract import CHECKPOINTS_DIR
from box.contract import RUN_LOG_FILE as RUN_LOG_FILE  # the run dir's names are the contract's
from box.contract import RUN_LOG_ROTATED as RUN_LOG_ROTATED
from trainer.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

CHECKPOINTS_PREFIX = f"{CHECKPOINTS_DIR}/"
LATEST_KEY = CHECKPOINTS_PREFIX + "LATEST"
BEST_KEY = CHECKPOINTS_PREFIX + "BEST"
CHECKPOINT_SUFFIX = ".pt"
HASH_SUFFIX = ".sha256"
HASH_CHUNK_BYTES = 4 * 1024 * 1024
# `checkpoint_file.checkpoint_name`'s form: the only names a pointer may hold or a
# resume may fetch. A pointer is read from the bucket, so it is checked before it becomes a
# file name (anything else could climb out of the run dir).
CHECKPOINT_NAME = re.compile(r"^step-[0-9]{9}-epoch-[0-9]{4}\.pt$")


def is_checkpoint_name(name: str) -> bool:
    return bool(CHECKPOINT_NAME.match(name))


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (checkpoints are ~100 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def hash_line(sha256: str, name: str) -> str:
    """The `.sha256` file's content: `sha256sum -c` can check it."""
    return f"{sha256}  {name}\n"


def parse_hash_line(text: str) -> str:
    """The hex digest from a `.sha256` file; ValueError when it is not one."""
    digest = text.split()[0] if text.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"not a sha256 line: {text[:80]!r}")
    return digest


def checkpoint_key(name: str) -> str:
    return CHECKPOINTS_PREFIX + name


def upload_checkpoint(store: ObjectStore, name: str, path: Path, sha256: str) -> None:
    """Object first, then its hash; the caller moves the pointers afterwards."""
    store.put_file(checkpoint_key(name), path)
    store.write_bytes(checkpoint_key(name) + HASH_SUFFIX, hash_line(sha256, name).encode())


def set_pointer(store: ObjectStore, key: str, name: str) -> None:
    store.write_bytes(key, name.encode())


def advance_latest(store: ObjectStore, name: str) -> None:
    """Point LATEST at `name` unless it names a later checkpoint already: a resume
    takes LATEST and the names before it, so moving it back would hide the newer ones
    (and a resume from there would go back in time)."""
    latest = read_pointer(store, LATEST_KEY)
    if latest is None or name > latest:
        set_pointer(store, LATEST_KEY, name)


def read_pointer(store: ObjectStore, key: str) -> str | None:
    """The checkpoint name a pointer holds; None when absent or not a checkpoint name."""
    try:
        text = store.read_bytes(key).decode(errors="replace").strip()
    except ObjectNotFound:
        return None
    if text and not is_checkpoint_name(text):
        log.warning("ignoring %s/%s: %r is not a checkpoint name", store.uri, key, text[:80])
        return None
    return text or None


OWNER_KEY = ".run-id"
"""The run a store is (its run id): written with the store's first upload, so a store
belongs to a run before any file of it (status.json) has landed. A dot key: never
restored into a run dir, never mirrored from one."""


def read_owner(store: ObjectStore) -> str | None:
    """The run id the store's owner marker names; None when it has none."""
    try:
        return store.read_bytes(OWNER_KEY).decode(errors="replace").strip() or None
    except ObjectNotFound:
        return None


def claim(store: ObjectStore, run_id: str) -> None:
    """Write the owner marker for `run_id` unless the store has one."""
    if read_owner(store) is None:
        store.write_bytes(OWNER_KEY, run_id.encode())


def remote_names(store: ObjectStore) -> list[str]:
    """Checkpoint names present in the store, in name order (oldest first)."""
    keys = store.list(CHECKPOINTS_PREFIX)
    names = (key[len(CHECKPOINTS_PREFIX) :] for key in keys)
    return sorted(name for name in names if is_checkpoint_name(name))


def candidates(store: ObjectStore) -> list[str]:
    """Names to resume from, newest first, as the run's own LATEST pointer bounds them:
    LATEST, then the older ones (a damaged LATEST falls back to the previous). Names
    past LATEST are never candidates: the writer moves LATEST after every upload, so
    such a name is not this run's (planted, or an upload whose pointer never moved)."""
    latest = read_pointer(store, LATEST_KEY)
    if latest is None:
        return []
    return sorted((name for name in remote_names(store) if name <= latest), reverse=True)


def download_verified(store: ObjectStore, name: str, dest: Path) -> str | None:
    """Fetch `name` to `dest` if its hash matches; returns the hash, or None (warned)."""
    if not is_checkpoint_name(name):
        log.warning("skipping remote checkpoint %r: not a checkpoint name", name[:80])
        return None
    try:
        expected = parse_hash_line(store.read_bytes(checkpoint_key(name) + HASH_SUFFIX).decode())
        store.get_file(checkpoint_key(name), dest)
    except (ObjectNotFound, ValueError, UnicodeDecodeError) as error:
        log.warning("skipping remote checkpoint %s: %s", name, error)
        return None
    actual = sha256_of(dest)
    if actual != expected:
        log.warning(
            "skipping remote checkpoint %s: sha256 %s does not match its record %s",
            name,
            actual[:12],
            expected[:12],
        )
        dest.unlink(missing_ok=True)
        return None
    return actual


def prune(store: ObjectStore, keep: Iterable[str]) -> list[str]:
    """Delete every checkpoint not in `keep` (object first, then its hash)."""
    keep = set(keep)
    removed = [name for name in remote_names(store) if name not in keep]
    for name in removed:
        store.delete(checkpoint_key(name))
        store.delete(checkpoint_key(name) + HASH_SUFFIX)
    return removed
