"""The trainer's environment on the box: `containerEnv` in a 0600 file, never a flag.

The file is mounted read-only into the container and loaded by the image's entrypoint
(`trainer.container_env`), so no secret is on a command line, in a log or in `docker
inspect`. A run's file lives in its run dir (a dot file, never mirrored) for as long
as its container may start again; a one-shot container's file goes once it started.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator

from box import contract
from ops.remote.ssh import Box
from trainer import container_env

ENV_FILE_NAME = ".container.env"
ENV_FILE_IN_CONTAINER = "/run/glucose-training/env"


def run_env_file(box_root: str, run_id: str) -> str:
    """The trainer's environment file for a run: there for as long as the box's resume
    unit may start the container again."""
    return f"{contract.run_dir(box_root, run_id)}/{ENV_FILE_NAME}"


def write_env_file(box: Box, path: str, env: dict[str, str]) -> None:
    """`env` into `path` on the box, 0600, through the SSH channel's stdin."""
    quoted, partial = shlex.quote(path), shlex.quote(path + ".tmp")
    box.run_with_input(
        f"umask 077 && mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && "
        f"cat > {partial} && mv -f {partial} {quoted}",
        container_env.render(env),
    )


@contextlib.contextmanager
def one_shot_env_file(box: Box, name: str, env: dict[str, str]) -> Iterator[str | None]:
    """An env file for containers started inside this block, removed when it ends: each
    loads it as it starts, and a bind mount keeps the file it mounted. None for an
    empty `env`. `name` says whose (`fetch-<dataset>`, ...)."""
    if not env:
        yield None
        return
    path = f"{box.root}/{contract.DATASETS_DIR}/.{name}.env"
    write_env_file(box, path, env)
    try:
        yield path
    finally:
        box.run(f"rm -f {shlex.quote(path)}", check=False)
