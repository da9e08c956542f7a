"""The `local` target: this machine's own Docker engine, driven without SSH.

`--target local` (or `GLUCOSE_TARGET=local`) selects it with every default; a target
file without `hosts` selects it with that file's keys (`storageUri`, `boxRoot`,
`containerEnv`, `dockerNetwork`, `gpuCount`), e.g. checkpoints to an `s3://` bucket.
Its files, unless the target file moves them, stay beside the checkout in `local/`
(gitignored): `local/box/` is its box root (runs, the dataset cache, leases) and
`local/storage/` its storage (`file://`), where checkpoints stream as they would to
a bucket.

The image is built here and never pushed: the engine that runs it is the one that
built it. No SSH key applies, so a file that names one without `hosts` is refused
(a lab box whose address was forgotten is no local run).
"""

from __future__ import annotations

from typing import Any

from invoke.exceptions import Exit

from ops import CHECKOUT
from ops.target.schema import KEYS, SSH_KEYS
from stack.outputs import StackOutput
from trainer.storage import parse_uri

LOCAL = "local"
"""The word that selects this machine, and its `cloud`: no cloud at all."""
LOCAL_DIR = CHECKOUT / LOCAL
BOX_ROOT = LOCAL_DIR / "box"
STORAGE_DIR = LOCAL_DIR / "storage"
SOURCE = "the local target"


def is_this_machine(outputs: dict[str, Any]) -> bool:
    """Target-file keys that name no box and no cloud: this machine."""
    return not outputs.get(StackOutput.HOSTS) and (outputs.get(StackOutput.CLOUD) or LOCAL) == LOCAL


def this_machine_outputs(given: dict[str, Any], source: str = SOURCE) -> dict[str, Any]:
    """`given` (a target file's keys, or none) with this machine's defaults filled in;
    Exit naming the key that makes no sense without SSH."""
    ssh_keys = [key for key in SSH_KEYS if key in given]
    if ssh_keys:
        raise Exit(
            f"{source} has {', '.join(ssh_keys)} but no hosts; list the box's address in "
            "hosts, or drop the SSH keys to train on this machine"
        )
    if given.get(StackOutput.REGISTRY):
        raise Exit(
            f"{source}: registry {given['registry']!r} is for boxes that pull; this machine "
            "runs the image its own engine built: drop registry"
        )
    defaults = {
        StackOutput.CLOUD: LOCAL,
        StackOutput.STORAGE_URI: f"file://{STORAGE_DIR}",
        KEYS["box_root"]: str(BOX_ROOT),
    }
    return {**defaults, **given, StackOutput.HOSTS: []}


def file_storage_dir(storage_uri: str) -> str | None:
    """The directory of a `file://` storage URI; None for a bucket."""
    location = parse_uri(storage_uri)
    return location.path if location.scheme == "file" else None
