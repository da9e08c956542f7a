"""What the container was given: its environment from a file mounted into it (secrets out
of `docker inspect`), its cores, and its mounts as the machine running it names them.

A target file's `containerEnv` (storage keys on a lab box) must not be passed as
`docker run --env` (the box's process list and `docker inspect` show it) nor
`--env-file` (inspect shows those too). `fab` writes it to a 0600 file on the box
and mounts it read-only; `GLUCOSE_ENV_FILE` names where, and the entrypoint
(`python -m trainer`, and the box's dataset fetch) loads it here before anything
reads the environment. Format: `NAME=value` per line, the value taken literally.

A path the trainer prints (`report in ...`, `cached in ...`) is one the user can open:
`fab` passes each mount as the box names it (`GLUCOSE_HOST_PATHS`), and `host_path`
turns `/workspace/runs/<id>/report.md` into `<boxRoot>/runs/<id>/report.md`; on the
local target, a folder of this machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from trainer.config import UserError

ENV_FILE_VARIABLE = "GLUCOSE_ENV_FILE"
HOST_PATHS_VARIABLE = "GLUCOSE_HOST_PATHS"
"""A JSON object: each mount's path in the container -> its path on the box."""


def cores() -> int:
    """The cores this process may run on: a container's CPU set, not the host's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def render(env: dict[str, str]) -> str:
    """The file's text for `env` (names and one-line values, checked by the caller)."""
    return "".join(f"{name}={value}\n" for name, value in sorted(env.items()))


def parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def load_env_file() -> None:
    """Set the variables of the file `GLUCOSE_ENV_FILE` names, if any (over the image's)."""
    path = os.environ.get(ENV_FILE_VARIABLE)
    if not path:
        return
    try:
        os.environ.update(parse(Path(path).read_text()))
    except OSError as error:
        raise UserError(
            f"{ENV_FILE_VARIABLE}={path}: cannot read it ({error.strerror}); expected the "
            "environment file `fab` mounts into the container"
        ) from None


def host_paths_setting(mounts: dict[str, str]) -> str:
    """`GLUCOSE_HOST_PATHS=...` for a container whose mounts are `mounts` (the path in the
    container -> the box's)."""
    return f"{HOST_PATHS_VARIABLE}={json.dumps(mounts, sort_keys=True)}"


def host_path(path: str | Path) -> str:
    """`path` as the box running this container names it: under a mount `fab` named
    (`GLUCOSE_HOST_PATHS`), the box's folder; anywhere else (no container), as it is."""
    try:
        mounts = json.loads(os.environ.get(HOST_PATHS_VARIABLE) or "{}")
    except ValueError:
        return str(path)
    inside = PurePosixPath(path)
    # The deepest mount first: /workspace/runs/<id> before a /workspace/runs above it.
    for mount in sorted(mounts if isinstance(mounts, dict) else {}, key=len, reverse=True):
        if inside == PurePosixPath(mount) or PurePosixPath(mount) in inside.parents:
            return str(PurePosixPath(str(mounts[mount])) / inside.relative_to(mount))
    return str(path)
