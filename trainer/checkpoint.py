"""Checkpoints: one dict with fixed keys, written atomically, verified by sha256.

`save` writes a temp file in the target's directory, fsyncs it, renames it over the
target and fsyncs the directory, so a crash at any moment leaves either the old or
the new file, never half of one; a `<name>.sha256` sidecar (sha256sum format) lets
`load` refuse a damaged file. `load` uses `torch.load(weights_only=True)`: a
checkpoint from a bucket must not be able to run code.

`CheckpointManager` is the one object `train.py` talks to: when to save, `last.pt` /
`best.pt`, and the newest loadable state to resume from. Remote mirroring
(`--checkpoint-uri`) plugs in at `CheckpointManager._publish`.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.config import UserError

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
HASH_CHUNK_BYTES = 1 << 20


class CheckpointError(Exception):
    """A checkpoint file is missing, damaged (sha256 mismatch) or not a checkpoint."""


@dataclass(frozen=True)
class CheckpointConfig:
    directory: Path
    """Local checkpoint dir, normally `<run_dir>/checkpoints`."""
    every_seconds: float = 600.0
    """Save `last.pt` when this many seconds passed since the previous save (0 = off)."""
    every_steps: int | None = None
    """Save `last.pt` every this many optimizer steps (None = off)."""
    uri: str | None = None
    """Remote mirror (file://, s3://, az://); None keeps checkpoints local only."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save(path: Path, state: dict[str, Any]) -> str:
    """Write `state` to `path` atomically with a `.sha256` sidecar; return the digest."""
    missing = [key for key in STATE_KEYS if key not in state]
    assert not missing, f"checkpoint state lacks {missing}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, lambda handle: torch.save(state, handle))
    digest = _sha256(path)
    sidecar = path.with_name(path.name + ".sha256")
    _write_atomic(sidecar, lambda handle: handle.write(f"{digest}  {path.name}\n".encode()))
    return digest


def load(path: Path) -> dict[str, Any]:
    """Verify the sidecar digest (when present) and load with weights_only=True."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        expected = sidecar.read_text().split()[0]
        if (actual := _sha256(path)) != expected:
            raise CheckpointError(f"{path}: sha256 {actual[:12]} != recorded {expected[:12]}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises a zoo of types for a truncated/foreign file
        raise CheckpointError(f"{path}: not loadable ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path}: not a trainer checkpoint (no 'model' key)")
    return state


def resolve_local(path_or_uri: str) -> Path:
    """A checkpoint argument as a local path (`file://` accepted)."""
    if path_or_uri.startswith("file://"):
        return Path(path_or_uri[len("file://") :])
    if "://" in path_or_uri:
        raise UserError(
            f"--checkpoint {path_or_uri}: remote checkpoints are fetched by trainer.sync, which "
            "this build lacks; download it first and pass the local path"
        )
    return Path(path_or_uri)


class CheckpointManager:
    """When to save, where (`last.pt`, `best.pt`), and what to resume from."""

    def __init__(self, config: CheckpointConfig) -> None:
        self.config = config
        self.directory = Path(config.directory)
        self.last_path = self.directory / "last.pt"
        self.best_path = self.directory / "best.pt"
        self.last_saved_at: float | None = None  # unix seconds, for status.json
        self._last_save_monotonic = time.monotonic()
        self._last_save_step = 0

    def due(self, step: int) -> bool:
        """Whether the time- or step-based policy asks for a `last.pt` now."""
        every_steps = self.config.every_steps
        if every_steps and step - self._last_save_step >= every_steps:
            return True
        every_seconds = self.config.every_seconds
        return bool(every_seconds) and time.monotonic() - self._last_save_monotonic >= every_seconds

    def save_last(self, state: dict[str, Any]) -> Path:
        save(self.last_path, state)
        self._mark_saved(state["step"])
        self._publish(self.last_path)
        return self.last_path

    def save_best(self, state: dict[str, Any]) -> Path:
        save(self.best_path, state)
        self._publish(self.best_path)
        return self.best_path

    def load_latest(self) -> dict[str, Any] | None:
        """The newest loadable checkpoint (last.pt, else best.pt), or None for a fresh run."""
        for path in (self.last_path, self.best_path):
            if not path.exists():
                continue
            try:
                state = load(path)
            except CheckpointError as error:
                print(f"checkpoint: skipping damaged {error}", flush=True)
                continue
            self._mark_saved(state["step"])
            return state
        return None

    def _mark_saved(self, step: int) -> None:
        self.last_saved_at = time.time()
        self._last_save_monotonic = time.monotonic()
        self._last_save_step = step

    def _publish(self, path: Path) -> None:
        """Mirror a freshly written checkpoint to `config.uri` (remote sync: issue 3)."""
        if self.config.uri is None:
            return
        # Seam for trainer.sync: upload `path` and its sidecar, then move LATEST.
        print(
            f"checkpoint: {path.name} kept locally; remote sync to {self.config.uri} "
            "is not in this build",
            flush=True,
        )


def capture_rng() -> dict[str, Any]:
    """Every RNG the loop may touch, as types torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": list(random.getstate()),
    }


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
