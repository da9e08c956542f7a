"""A run's log from the stack's storage, for a run no container holds any more.

Docker keeps a run's output only while its container exists; a sweep's trial also
writes it to `train.log` in its run dir, which is mirrored to `<storageUri>/runs/<id>/`
and so outlives the container and the box.
"""

from __future__ import annotations

from stack import storage_layout
from trainer.sweep.spec import TRIAL_LOG_FILE


def stored_log(storage_uri: str, run_id: str, tail: str) -> str | None:
    """The last `tail` lines (`all`: every line) of the run's stored log; None when
    storage has none."""
    from trainer.storage import ObjectNotFound, open_store

    try:
        text = open_store(storage_layout.run_uri(storage_uri, run_id)).read_bytes(TRIAL_LOG_FILE)
    except ObjectNotFound:
        return None
    lines = text.decode(errors="replace").splitlines(keepends=True)
    if tail.isdigit():  # as `docker logs --tail`: anything else shows every line
        lines = lines[max(len(lines) - int(tail), 0) :]
    return "".join(lines)


def no_log_message(run_id: str, where: str, storage_uri: str) -> str:
    return (
        f"no container holds run {run_id} on {where}, and {storage_uri} has no "
        f"runs/{run_id}/{TRIAL_LOG_FILE} (only a sweep's trials keep one); "
        f"`fab status --run {run_id}` or `fab runs` shows its record"
    )
