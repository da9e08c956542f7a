"""What the container was given: its environment from a file mounted into it (secrets out
of `docker inspect`), and its cores.

A target file's `containerEnv` (storage keys on a lab box) must not be passed as
`docker run --env` (the box's process list and `docker inspect` show it) nor
`--env-file` (inspect shows those too). `fab` writes it to a 0600 file on the box
and mounts it read-only; `GLUCOSE_ENV_FILE` names where, and the entrypoint
(`python -m trainer`, and the box's dataset fetch) loads it here before anything
reads the environment. Format: `NAME=value` per line, the value taken literally.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.config import UserError

ENV_FILE_VARIABLE = "GLUCOSE_ENV_FILE"


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
