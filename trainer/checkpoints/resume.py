"""Choose the checkpoint a run resumes from, among the run dir and the run's store.

The store is written by the box's identity, so by anything on the box: its listing
is not trusted to name the newest checkpoint. Candidates are the run dir's own step
files and, from the store, its LATEST pointer and the checkpoints before it (a
damaged LATEST falls back to the previous one); a name past LATEST is never one.
Newest name first (names sort in training order), the run dir's copy first when it
is at least as new. Each must match its sha256 record, load with
`weights_only=True`, hold what its name says (step, epoch) and fit this run (the
caller's `check`: run id, config, data set fingerprint, model); one that does not is
skipped with a warning naming why (a damaged local file is renamed `*.damaged`,
kept for inspection) and the previous one is tried. When every candidate was
refused because it does not fit the run, the resume is refused (UserError) rather
than a fresh start that would overwrite the store's LATEST. The choice and its
reason are logged. `last.pt` and `best.pt` are the last resort, for run dirs
written before step files existed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from box.contract import BEST_CHECKPOINT, LAST_CHECKPOINT, LAUNCH_FILE, STOPPED_BY_USER
from trainer.checkpoints import layout
from trainer.checkpoints.checkpoint_file import (
    DAMAGED_SUFFIX,
    STEP_FILE_GLOB,
    CheckpointError,
    checkpoint_name,
    link_atomic,
    load,
    sidecar_path,
    write_sidecar,
)
from trainer.config import RunConfig, UserError
from trainer.storage import ObjectStore
from trainer.storage.local_paths import UnsafeKey, local_path

log = logging.getLogger(__name__)

# With nothing local, starting fresh would overwrite the store's LATEST: wait for
# storage this long (an outage at start-up), then refuse rather than guess.
STORE_WAIT_SECONDS = 60.0
STORE_RETRY_MAX_SECONDS = 10.0
# Names at the top of the run dir a restore from the store never writes, as a file or
# as a directory (a key `STOPPED_BY_USER/x` would make one): the box's own records.
NOT_RESTORED = (LAUNCH_FILE, STOPPED_BY_USER)

Check = Callable[[dict[str, Any]], str | None]
"""Why a checkpoint's content cannot continue this run, or None when it can."""

# Resuming with any of these changed would silently train a different run. The data
# set's content is checked by fingerprint, not by path: a box resuming from storage
# may keep it elsewhere.
RESUME_MUST_MATCH = (
    "model",
    "train.seed",
    "train.batch_size",
    "optim.grad_accum",
    # The optimizer's and schedule's own state come from the checkpoint: a new value
    # would be recorded in config.json but not trained with.
    "optim.lr",
    "optim.weight_decay",
    "optim.decay_norms_and_biases",
    "optim.beta2",
    "optim.warmup_fraction",
    "optim.min_lr_fraction",
    "optim.grad_clip_norm",
    "data.val_fraction",
    "data.test_fraction",
)


@dataclass(frozen=True)
class Found:
    path: Path
    state: dict[str, Any]
    in_store: bool
    """False: the store lacks it (killed before the upload), so it must be sent."""
    why: str = ""
    """Which one was taken and why, as logged."""
    fetched: bool = False
    """Taken from the store: newer than anything in the run dir."""


@dataclass
class _Search:
    """One resume decision: the candidates on both sides and what was refused."""

    directory: Path
    store: ObjectStore | None
    check: Check
    local: dict[str, Path]
    remote: list[str]
    misfits: list[str] = field(default_factory=list)

    @property
    def latest(self) -> str | None:
        return self.remote[0] if self.remote else None

    def names(self) -> list[str]:
        return sorted(set(self.local) | set(self.remote), reverse=True)

    def accept(self, path: Path, name: str | None, *, fetched: bool = False) -> dict | None:
        """The state in `path` if it verifies, says what its name says and fits (and,
        `fetched` from the store, belongs to this run: a run dir copied to another name
        may resume from its own files)."""
        state = _try_load(path)
        if state is None:
            return None
        if name is not None and checkpoint_name(state) != name:
            log.warning(
                "checkpoint: refusing %s: it holds step %s, epoch %s (%s says otherwise)",
                path,
                state["step"],
                state["epoch"],
                name,
            )
            return None
        reason = self.check(state) or (_other_run(state, self.directory) if fetched else None)
        if reason is not None:
            log.warning("checkpoint: refusing %s: %s", path, reason)
            self.misfits.append(reason)
            return None
        return state

    def why_local(self, name: str) -> str:
        if self.store is None:
            return f"{name} from the run dir: its newest valid checkpoint"
        if self.latest is None:
            return f"{name} from the run dir: the store has no LATEST checkpoint"
        if name < self.latest:
            return f"{name} from the run dir: the store's newer ones were refused"
        relation = "as new as" if name == self.latest else "newer than"
        return f"{name} from the run dir: {relation} the store's LATEST {self.latest}"

    def why_remote(self, name: str) -> str:
        newest_local = max(self.local, default=None)
        here = f"the run dir's newest is {newest_local}" if newest_local else "none in the run dir"
        pointer = "its LATEST" if name == self.latest else f"before its LATEST {self.latest}"
        return f"{name} from {self.store.uri}: {pointer} ({here})"


def find_newest(directory: Path, store: ObjectStore | None, check: Check) -> Found | None:
    """The checkpoint to resume from, or None for a fresh run (UserError when every
    candidate belongs to another run or configuration)."""
    local = {
        path.name: path
        for path in directory.glob(STEP_FILE_GLOB)
        if layout.is_checkpoint_name(path.name)
    }
    remote = _remote_candidates(store, have_local=bool(local)) if store is not None else []
    search = _Search(directory, store, check, local, remote)
    found = _first_accepted(search) or _fallback(search)
    if found is None and search.misfits:
        raise UserError(f"resume: {search.misfits[0]}")
    if found is not None:
        log.info("checkpoint: resuming from %s", found.why)
    return found


def _first_accepted(search: _Search) -> Found | None:
    for name in search.names():
        if name in search.local:
            if state := search.accept(search.local[name], name):
                why = search.why_local(name)
                return Found(search.local[name], state, name in search.remote, why)
            if search.local[name].exists():  # refused for its content, not set aside as
                continue  # damaged: the store's copy of it is the same checkpoint
        if name in search.remote and (path := _fetch(search.store, name, search.directory)):
            if (state := search.accept(path, name, fetched=True)) is None:
                _discard(path)
                continue
            _restore_run_files(search.directory.parent, search.store)
            _fetch_best(search)
            return Found(path, state, True, search.why_remote(name), fetched=True)
    return None


def _fallback(search: _Search) -> Found | None:
    for path in (search.directory / LAST_CHECKPOINT, search.directory / BEST_CHECKPOINT):
        if path.exists() and (state := search.accept(path, None)) is not None:
            return Found(path, state, True, f"{path.name}: no step file verifies")
    return None


def _try_load(path: Path) -> dict[str, Any] | None:
    try:
        return load(path, require_record=True)
    except CheckpointError as error:
        log.warning("checkpoint: skipping damaged %s; trying the previous one", error)
    if path.name.startswith("step-"):
        for damaged in (path, sidecar_path(path)):
            if damaged.exists():
                damaged.replace(damaged.with_name(damaged.name + DAMAGED_SUFFIX))
    return None


def _discard(path: Path) -> None:
    """A fetched checkpoint that was refused must not become a local candidate."""
    for fetched in (path, sidecar_path(path)):
        fetched.unlink(missing_ok=True)


def _remote_candidates(store: ObjectStore, *, have_local: bool) -> list[str]:
    deadline = time.monotonic() + STORE_WAIT_SECONDS
    delay_s = 1.0
    while True:
        try:
            return layout.candidates(store)
        except Exception as error:  # any SDK error: the store is unreachable or refusing
            message = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        if have_local:
            log.warning(
                "checkpoint: cannot list %s (%s); resuming from the run dir", store.uri, message
            )
            return []
        if time.monotonic() + delay_s > deadline:
            raise UserError(
                f"--checkpoint-uri {store.uri}: cannot list its checkpoints ({message}); "
                "fix the credentials or endpoint and run again (starting fresh could "
                "overwrite a run stored there)"
            )
        log.warning("checkpoint: cannot list %s (%s); retrying", store.uri, message)
        time.sleep(delay_s)
        delay_s = min(delay_s * 2, STORE_RETRY_MAX_SECONDS)


def _fetch(store: ObjectStore, name: str, directory: Path) -> Path | None:
    """Download `name` into the run dir, verified against its recorded sha256."""
    path = directory / name  # `name` passed layout.is_checkpoint_name: a plain file name
    try:
        digest = layout.download_verified(store, name, path)
    except Exception as error:  # an outage mid-download: try the next candidate
        log.warning("checkpoint: fetching %s from %s failed: %s", name, store.uri, error)
        return None
    if digest is None:
        return None
    write_sidecar(path, digest)
    return path


def _restore_run_files(run_dir: Path, store: ObjectStore) -> None:
    """A new box resuming from the store gets the run's history back (metrics.jsonl,
    tb/, ...) before it logs more: its mirror would otherwise replace the stored
    history with the part after the resume. Keys go through `local_path`: one that
    would land outside the run dir is refused and reported, never written."""
    restored, refused = 0, []
    try:
        for key in store.list():
            if key.startswith(layout.CHECKPOINTS_PREFIX) or key.split("/")[0] in NOT_RESTORED:
                continue
            try:
                path = local_path(run_dir, key)
            except UnsafeKey as error:
                refused.append(str(error))
                continue
            # Dot files are never mirrored (temp files, the env file): not restored either.
            hidden = any(part.startswith(".") for part in key.split("/"))
            if key == layout.RUN_LOG_FILE and path.exists():
                # This process's own log has begun (run_log): the stored one is before it.
                path = path.with_name(layout.RUN_LOG_ROTATED)
                if path.exists():
                    continue
            if not hidden and not path.exists():
                store.get_file(key, path)
                restored += 1
    except Exception as error:  # history is worth a warning, not a refusal to train
        log.warning("checkpoint: could not restore run files from %s: %s", store.uri, error)
    for reason in refused:
        log.warning("checkpoint: %s in %s; not restored", reason, store.uri)
    if restored:
        log.warning("checkpoint: restored %d run files from %s", restored, store.uri)


def _fetch_best(search: _Search) -> None:
    """An empty run dir resumed from the store needs `best.pt` for the final report:
    the store's BEST, if it verifies and fits the run like any candidate."""
    directory, store = search.directory, search.store
    best = directory / BEST_CHECKPOINT
    if best.exists():
        return
    try:
        name = layout.read_pointer(store, layout.BEST_KEY)
    except Exception as error:
        log.warning("checkpoint: cannot read BEST at %s: %s", store.uri, error)
        return
    if not name:
        return
    fetched = not (directory / name).exists()
    path = _fetch(store, name, directory) if fetched else directory / name
    if path is None:
        return
    if search.accept(path, name, fetched=fetched) is None:
        if fetched:
            _discard(path)
        return
    link_atomic(path, best)


def misfit(
    state: dict[str, Any], config: RunConfig, fingerprint: str, total_steps: int
) -> str | None:
    """The content check of a resume candidate: the same data, the settings that
    shape the run, and a position inside this run."""
    if state["dataset_fingerprint"] != fingerprint:
        return (
            "the dataset differs from the one in the run dir's checkpoint; "
            "use the same --data or a new --run-dir"
        )
    saved, now = state["config"], config.to_dict()
    for dotted in RESUME_MUST_MATCH:
        old, new = _setting(saved, dotted), _setting(now, dotted)
        if old != new:
            return (
                f"{dotted} was {old} in the run dir's checkpoint, now {new}; "
                "use the same flags or a new --run-dir"
            )
    if state["step"] > total_steps or state["epoch"] > config.train.epochs:
        return (
            f"step {state['step']}, epoch {state['epoch']} lie beyond this run's {total_steps} "
            f"steps ({config.train.epochs} epochs); pass the --epochs it was started with"
        )
    return None


def _other_run(state: dict[str, Any], directory: Path) -> str | None:
    """Why a checkpoint from the store is another run's (its run dir had another name),
    or None. The run id is the run dir's name (`TrainConfig.run_id`)."""
    saved = Path(str(_setting(state["config"], "train.run_dir"))).resolve().name
    run_id = Path(directory).resolve().parent.name
    if saved == run_id:
        return None
    return (
        f"it belongs to run {saved!r}, not {run_id!r}; resume it with a run dir named "
        f"{saved!r}, or start this run with another --checkpoint-uri"
    )


def _setting(config: dict[str, Any], dotted: str) -> Any:
    """`config["a"]["b"]` for "a.b"; None where a checkpoint's config lacks it."""
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config
