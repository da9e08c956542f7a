"""Where things go in a stack's storage (`storageUri`: an S3 bucket or a Blob container).

    runs/<run_id>/            one run's mirror and checkpoints: its `--checkpoint-uri`
                              (inside it, trainer.checkpoints.layout decides)
    datasets/<name>/          a dataset, manifest.json last (trainer.data.manifest)
    sweeps/<sweep_id>/        a sweep's queue, state and report (trainer.sweep.spec); its
                              trials are runs under runs/
    box/programs-<sha256>.tar
                              the box programs a new box fetches at first boot (box/)
    tmp/                      scratch: both clouds' lifecycle rules delete it after 2 days

The Pulumi program declares the lifecycle rule and the programs' object; `fab` reads and
writes runs and datasets. Plain strings: no storage client here. A run's folder and a
sweep's are the box's contract (`box.contract.run_uri`, `sweep_uri`): the trainer,
which cannot import this module, finds them there too.
"""

from __future__ import annotations

from box import contract
from box.contract import run_uri as run_uri  # `fab` finds them here too
from box.contract import sweep_uri as sweep_uri

RUNS_PREFIX = contract.RUNS_DIR
"""The box programs store a failed run's end under it too (box/stored_end.py)."""
DATASETS_PREFIX = "datasets"
SWEEPS_PREFIX = contract.SWEEPS_DIR
BOX_PROGRAMS_PREFIX = "box"
TMP_PREFIX = "tmp"
STALE_TMP_DAYS = 2
"""What is left under tmp/ this long is a crashed writer's and only costs money."""


def dataset_uri(storage_uri: str, name: str) -> str:
    return f"{storage_uri.rstrip('/')}/{DATASETS_PREFIX}/{name}"


def box_programs_key(sha256: str) -> str:
    """The key of one build of the box programs; its name is its content's hash, so a
    box pinned to it by its user data always finds the bytes it was made with."""
    return f"{BOX_PROGRAMS_PREFIX}/programs-{sha256}.tar"
