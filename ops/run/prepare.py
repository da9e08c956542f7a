"""What `fab prepare-data` does on the box: `prepare-vitaldb` in the trainer image,
then the result published to storage by `trainer/data/manifest.py`, both next to the
data, so the case files and the dataset never cross the user's link.

The preparation runs detached in a container of its own (`glucose-prepare-<name>`)
writing straight into the box's dataset cache, `BOX_ROOT/datasets/<name>`, so a
later `fab train --dataset <name>` finds it there already verified. `fab` follows
its log; a dropped connection leaves it running (the box's idle watchdog counts the
container as busy while its heartbeat moves, `.prepare/heartbeat.json`), and running
the task again attaches to it, or, once it has ended, resumes or confirms it
(prepare-vitaldb is resumable and leaves a finished preparation alone).
"""

from __future__ import annotations

import json
import shlex
import sys

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.remote.ssh import Box
from ops.run import container, env_files
from ops.run.status import json_or_empty
from ops.runs.log_lines import LogLines
from ops.terminal_text import printable
from trainer.storage import storage_environment

console = Console(stderr=True, soft_wrap=True)
SAID_CHARACTERS = 400
"""Of the box's words a one-line error quotes."""


def container_name(name: str) -> str:
    """The container's name, quoted for the shell (a checked dataset name already)."""
    return shlex.quote(f"{contract.PREPARE_CONTAINER_PREFIX}{name}")


def _trainer_args(name: str, args: list[str]) -> list[str]:
    return ["prepare-vitaldb", "--out", container.workspace_dataset(name), *args]


def prepare_command(
    box: Box, image: str, name: str, user: str, args: list[str], env_file: str | None = None
) -> str:
    """The `docker run` line that starts prepare-vitaldb detached on the box."""
    dataset = f"{contract.dataset_dir(box.root, name)}:{container.workspace_dataset(name)}"
    return shlex.join(
        [
            "docker", "run", "--detach",
            "--name", f"{contract.PREPARE_CONTAINER_PREFIX}{name}",
            "--label", f"{contract.PREPARE_LABEL}={name}",
            *container.container_options(box.target, user, env_file),
            *container.volume_options(dataset),
            image, *_trainer_args(name, args),
        ]
    )  # fmt: skip


def _container(box: Box, name: str) -> dict | None:
    """`docker inspect` of the preparation's container; None when there is none."""
    result = box.run(f"docker inspect {container_name(name)}", check=False)
    return json.loads(result.stdout)[0] if result.exited == 0 else None


def follow(box: Box, name: str) -> None:
    """The preparation's log as it comes, each line made safe and cut (`LogLines`: the
    container's words), until it ends."""
    # A terminal, on purpose: the box's idle watchdog counts a terminal session as a
    # person at the box, which keeps it up for as long as we follow the preparation.
    lines = LogLines(sys.stdout, pty=True)
    try:
        box.run(f"docker logs --follow {container_name(name)}", hide=False, pty=True,
                check=False, out_stream=lines)  # fmt: skip
    except (OSError, EOFError) as error:
        raise Exit(
            f"lost the connection to {box.address} while following the preparation "
            f"({error}); it goes on there: run the same command again to attach to it"
        ) from None
    finally:
        lines.close()


def run_preparation(box: Box, image: str, name: str, user: str, args: list[str]) -> None:
    """Start the preparation (or attach to the running one), follow it to its end."""
    container = _container(box, name)
    if container is not None and container["State"]["Running"]:
        if container["Args"] != _trainer_args(name, args):
            flags = printable(shlex.join(map(str, container["Args"][3:])), SAID_CHARACTERS)
            raise Exit(
                f"a preparation of {name} with other flags is running on {box.address} "
                f"({flags}); wait for it, or pick another --name"
            )
        console.print(f"attaching to the preparation already running on {box.address}")
    else:
        if container is not None:
            box.run(f"docker rm {container_name(name)}")
        box.run(f"mkdir -p {shlex.quote(contract.dataset_dir(box.root, name))}")
        # containerEnv but the storage keys: the preparation never touches storage.
        storage = storage_environment(box.target.container_env)
        env = {k: v for k, v in box.target.container_env.items() if k not in storage}
        with env_files.one_shot_env_file(box, f"prepare-{name}", env) as env_file:
            box.run(prepare_command(box, image, name, user, args, env_file))
    follow(box, name)
    exit_code = box.run(f"docker wait {container_name(name)}").stdout.strip()
    if exit_code != "0":
        last = box.run(f"docker logs --tail 1 {container_name(name)}", check=False)
        lines = (last.stdout + last.stderr).strip().splitlines() or ["no output"]
        line = printable(lines[-1], SAID_CHARACTERS)  # the container's words
        if exit_code == str(contract.EXIT_USER_ERROR):  # the line says what to do
            raise Exit(f"prepare-vitaldb on {box.address}: {line.removeprefix('error: ')}")
        raise Exit(
            f"prepare-vitaldb on {box.address} exited {exit_code}: {line}; "
            "run the same command again to resume it"
        )
    box.run(f"docker rm {container_name(name)}")


def dataset_meta(box: Box, name: str) -> dict:
    """The prepared dataset's meta.json; {} where it holds no object (torn, hostile)."""
    text = box.read_text(f"{contract.dataset_dir(box.root, name)}/meta.json")
    if text is None:
        raise Exit(f"no meta.json in {name} on {box.address} after the preparation")
    return json_or_empty(text)


def made(meta: dict) -> str:
    """`1,234 windows from 50 cases (3 skipped)`, from meta.json as the box wrote it: a
    count it holds as no whole number is `?`."""
    windows, cases, skipped = (meta.get(k) for k in ("windows", "cases", "cases_skipped"))
    count = f"{windows:,}" if isinstance(windows, int) and not isinstance(windows, bool) else "?"
    return f"{count} windows from {_length(cases)} cases ({_length(skipped)} skipped)"


def _length(value: object) -> str:
    return str(len(value)) if isinstance(value, list) else "?"


def publish_on_box(box: Box, image: str, name: str, user: str, uri: str) -> str:
    """Upload the box's dataset to `uri` with its manifest, from the box."""
    host_dir = contract.dataset_dir(box.root, name)
    volume = f"{host_dir}:{container.workspace_dataset(name)}:ro"
    with console.status(f"box publishing {name} to {uri}"):
        return container.run_once(
            box,
            image,
            user,
            volume,
            ["dataset-publish", container.workspace_dataset(name), uri],
            f"publish-{name}",
        )
