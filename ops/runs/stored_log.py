"""A run's log from the stack's storage, for a run no container holds any more.

Docker keeps a run's output only while its container exists; every run also writes it
to `train.log` in its run dir (trainer.checkpoints.run_log: size-capped, the part before
the cap in `train.log.1`), mirrored to `<storageUri>/runs/<id>/` with the checkpoints,
so it outlives the container and the box.
"""

from __future__ import annotations

from stack import storage_layout
from trainer.checkpoints.layout import RUN_LOG_FILE, RUN_LOG_ROTATED


def stored_log(storage_uri: str, run_id: str, tail: str) -> str | None:
    """The last `tail` lines (`all`: every line) of the run's stored log; None when
    storage has none."""
    from trainer.storage import ObjectNotFound, open_store

    store = open_store(storage_layout.run_uri(storage_uri, run_id))
    parts = []
    for name in (RUN_LOG_ROTATED, RUN_LOG_FILE):
        try:
            parts.append(store.read_bytes(name))
        except ObjectNotFound:
            continue
    if not parts:
        return None
    lines = b"".join(parts).decode(errors="replace").splitlines(keepends=True)
    if tail.isdigit():  # as `docker logs --tail`: anything else shows every line
        lines = lines[max(len(lines) - int(tail), 0) :]
    return "".join(lines)


def no_log_message(run_id: str, where: str, storage_uri: str) -> str:
    return (
        f"no container holds run {run_id} on {where}, and {storage_uri} has no "
        f"runs/{run_id}/{RUN_LOG_FILE} (a run killed before its first upload has none); "
        f"`fab status --run {run_id}` or `fab runs` shows its record"
    )
