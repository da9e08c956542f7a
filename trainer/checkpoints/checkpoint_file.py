"""One checkpoint file: a dict with fixed keys, written atomically, verified by sha256.

`save` streams the serialisation into a temp file in the target's directory,
hashing it on the way (one pass, no in-memory copy, no reading back), fsyncs it,
renames it over the target and fsyncs the directory, so a crash at any moment
leaves either the old or the new file, never half of one; a `<name>.sha256` sidecar
(sha256sum format) lets `load` refuse a damaged file. `load` uses
`torch.load(weights_only=True)`: a checkpoint from a bucket must not be able to run
code.

On disk (`<run_dir>/checkpoints/`): `step-<step>-epoch-<epoch>.pt` for the last K
saves, and `last.pt` / `best.pt` as hard links to the newest and the best of them.
Names sort in training order, locally and in the store (`trainer.checkpoints.layout`).
When and where a run saves is `trainer.checkpoints.manager`'s business.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from box.contract import BEST_CHECKPOINT, CHECKPOINTS_DIR
from trainer.atomic_write import fsync_dir, open_atomic, temp_path, write_bytes_atomic
from trainer.checkpoints import layout
from trainer.config import UserError
from trainer.storage import InvalidStorageUri, ObjectStore, StorageError, open_store

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
# How torch names what a weights-only load refused to unpickle.
WEIGHTS_ONLY_REFUSAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
DAMAGED_SUFFIX = ".damaged"


class CheckpointError(Exception):
    """A checkpoint file is missing, damaged (sha256 mismatch) or not a checkpoint."""


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
        raise CheckpointError(f"{path}: not loadable ({_load_failure(error)})") from None
    if (problem := _structure_problem(state)) is not None:
        raise CheckpointError(f"{path}: not a trainer checkpoint ({problem})")
    return state


def _load_failure(error: Exception) -> str:
    """torch.load's reason in one line, without its advice to load with
    weights_only=False: that would let the file run code, which the trainer never does."""
    text = str(error)
    if "weights_only" in text or "Weights only" in text:
        needs = WEIGHTS_ONLY_REFUSAL.search(text)
        what = needs.group(1) if needs else "more than tensors and plain containers"
        return f"it needs {what} to load, and the trainer loads weights only, never code"
    return f"{type(error).__name__}: {(text.splitlines() or [''])[0]}"


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


def open_run_store(uri: str, flag: str = "--checkpoint-uri") -> ObjectStore:
    """The store of a run's URI, or a one-line UserError naming `flag`."""
    try:
        return open_store(uri)
    except (InvalidStorageUri, StorageError, ImportError) as error:
        raise UserError(f"{flag}: {error}") from None


# What `evaluate --checkpoint` takes, in the words of its errors.
CHECKPOINT_FORMS = (
    f"a local .pt file (a run dir's {CHECKPOINTS_DIR}/{BEST_CHECKPOINT}), a run's URI "
    "(s3://BUCKET/PREFIX/runs/ID, az://ACCOUNT/CONTAINER/PREFIX/runs/ID or "
    "file:///PATH/runs/ID: its BEST checkpoint, else LATEST) or a checkpoint's URI "
    f"(<run URI>/{CHECKPOINTS_DIR}/step-NNNNNNNNN-epoch-NNNN.pt)"
)


def resolve_local(path_or_uri: str) -> Path:
    """A checkpoint argument (one of CHECKPOINT_FORMS) as a local path, fetching (and
    verifying) a remote one."""
    local = path_or_uri
    if local.startswith("file://") and local.endswith(layout.CHECKPOINT_SUFFIX):
        local = local[len("file://") :]
    if "://" not in local:
        if not Path(local).is_file():
            raise UserError(
                f"--checkpoint {path_or_uri}: no such file; expected {CHECKPOINT_FORMS}"
            )
        return Path(local)
    run_uri, name = path_or_uri.rstrip("/"), None
    if run_uri.endswith(layout.CHECKPOINT_SUFFIX):
        run_uri, _, name = run_uri.rpartition("/" + layout.CHECKPOINTS_PREFIX)
        if not run_uri or not layout.is_checkpoint_name(name):
            raise UserError(
                f"--checkpoint {path_or_uri} is none of the forms it takes: {CHECKPOINT_FORMS}"
            )
    store = open_run_store(run_uri, "--checkpoint")
    try:
        return _fetch(store, name, path_or_uri)
    except StorageError as error:
        raise UserError(f"--checkpoint {path_or_uri}: {error}") from None


def _fetch(store: ObjectStore, name: str | None, path_or_uri: str) -> Path:
    """Checkpoint `name` of a run's store (None: its BEST, else LATEST), verified."""
    name = (
        name
        or layout.read_pointer(store, layout.BEST_KEY)
        or layout.read_pointer(store, layout.LATEST_KEY)
    )
    if not name:
        raise UserError(
            f"--checkpoint {path_or_uri}: no BEST or LATEST checkpoint there; "
            f"expected {CHECKPOINT_FORMS}"
        )
    # A directory of its own: runs share step names, so a shared cache could mix them.
    dest = Path(tempfile.mkdtemp(prefix="glucose-checkpoint-")) / name
    digest = layout.download_verified(store, name, dest)
    if digest is None:
        raise UserError(f"--checkpoint {path_or_uri}: {name} is missing or fails its sha256")
    write_sidecar(dest, digest)
    return dest


def capture_rng() -> dict[str, Any]:
    """The CPU's RNGs the loop may touch, as types torch.load(weights_only=True) accepts.

    No GPU generator: nothing the loop draws from one outlives a micro-batch (dropout
    is reseeded from its position before each, `data.pipeline.micro_batch_seed`, and
    the epoch order has its own CPU generator). A state per visible GPU (`--gpus all`
    shows 8) made a resume on a box with fewer GPUs fail in `set_rng_state_all`.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": list(random.getstate()),
    }


def restore_rng(state: dict[str, Any]) -> None:
    """`capture_rng`'s state back; a "cuda" list (older checkpoints) stays unused."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
