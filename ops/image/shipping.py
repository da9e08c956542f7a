"""Getting the trainer image onto the boxes: pushed once to the stack's registry and
pulled by each box, or `docker save | docker load` over SSH without a registry.

The pull logs the box into the registry with a token on stdin and a RAM-only docker
config (see `ops.image.registry`), so the box never stores a credential. Without a
registry the image streams over the SSH connection itself; that moves every layer
every time, so it is the fallback, not the default.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass

from invoke.exceptions import Exit
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from ops.image import build
from ops.image.build import docker, docker_env, push
from ops.image.registry import (
    RegistryLogin,
    login_failure_message,
    login_for,
    with_docker_login,
)
from ops.remote.ssh import Box, raise_for_remote_failure
from ops.target.schema import Target

STREAM_CHUNK_BYTES = 1024 * 1024
console = Console(stderr=True, soft_wrap=True)
LOAD_TIMEOUT_SECONDS = 3600


@dataclass(frozen=True)
class LoadReport:
    image: str
    bytes_sent: int
    seconds: float
    output: str


def box_has_image(box: Box, image: str) -> bool:
    return box.run(f"docker image inspect {shlex.quote(image)}", check=False).exited == 0


def pull_on_box(box: Box, image: str, login: RegistryLogin | None, server: str) -> None:
    """`docker pull` on the box, logged in for just this command."""
    line, stdin = with_docker_login(login, f"docker pull --quiet {shlex.quote(image)}")
    if stdin is None:
        result = box.run(line, check=False)
        exit_code, output = result.exited, result.stderr + result.stdout
    else:
        exit_code, output = box.run_with_input(line, stdin, check=False)
    if exit_code != 0:
        if "No space left on device" in output:
            raise_for_remote_failure(box, "docker pull", exit_code, output)
        raise Exit(login_failure_message(server, output))


def _image_bytes(image: str) -> int:
    result = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", image],
        capture_output=True,
        text=True,
        env=docker_env(),
        check=False,
    )
    return int(result.stdout.strip() or 0)


def load_on_box(box: Box, image: str) -> LoadReport:
    """Stream `docker save IMAGE` into `docker load` on the box, with a progress bar."""
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, env=docker_env())
    channel = box.connection.client.get_transport().open_session()
    channel.exec_command("docker load")
    started, sent = time.monotonic(), 0
    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress("docker save | ssh docker load", *columns, transient=True) as progress:
        # The tar is a bit larger than the image's reported size; the bar is a guide.
        bar = progress.add_task("load", total=_image_bytes(image) or None)
        while chunk := save.stdout.read(STREAM_CHUNK_BYTES):
            channel.sendall(chunk)
            sent += len(chunk)
            progress.advance(bar, len(chunk))
    channel.shutdown_write()
    output = _drain(channel)
    exit_code = channel.recv_exit_status()
    channel.close()
    if save.wait() != 0:
        raise Exit(f"`docker save {image}` exited {save.returncode}; is the image built?")
    if exit_code != 0:
        raise_for_remote_failure(box, "docker load", exit_code, output)
    seconds = time.monotonic() - started
    return LoadReport(image=image, bytes_sent=sent, seconds=seconds, output=output)


def _drain(channel) -> str:
    """Everything the remote command printed, stdout and stderr."""
    chunks = []
    while True:
        data = channel.recv(65536)
        if not data:
            break
        chunks.append(data)
    while channel.recv_stderr_ready():
        chunks.append(channel.recv_stderr(65536))
    return b"".join(chunks).decode(errors="replace")


def ship_image(box: Box, local_name: str, remote_name: str | None) -> str:
    """Make the image present on the box; returns the name the box knows it by."""
    name = remote_name or local_name
    if box_has_image(box, name):
        console.print(f"{box.address} already has {name}")
        return name
    if remote_name is not None:
        with console.status(f"pulling {name} on the box"):
            pull_on_box(box, name, login_for(box.target.registry), box.target.registry)
        return name
    report = load_on_box(box, local_name)
    console.print(
        f"loaded {local_name} on the box over SSH: {report.bytes_sent / 1e6:.0f} MB "
        f"in {report.seconds:.0f} s"
    )
    return name


def push_image(target: Target, name: str) -> str:
    """Tag `name` for the target's registry and push it; returns the remote name."""
    if not target.registry and target.this_machine:
        raise Exit(
            f"{target.source} is this machine: its engine runs the image it built, no push "
            "needed; `fab train` uses it as it is"
        )
    if not target.registry:
        raise Exit(
            f"{target.source} has no registry; `fab train` ships the image over SSH "
            "instead (docker save | docker load)"
        )
    remote = f"{target.image_name}:{name.rsplit(':', 1)[1]}"
    docker(["tag", name, remote])
    report = push(remote, login_for(target.registry), target.registry)
    console.print(
        f"pushed {remote} in {report.seconds:.1f} s: {report.pushed_layers} layers sent, "
        f"{report.existing_layers} already in the registry"
    )
    return remote


@dataclass(frozen=True)
class ImageSource:
    """The image a task ships (its `--image-name`, `--base-image`, `--build-arg` and
    `--extra-ca`): `name`, a built image, else this tree's, built when missing."""

    name: str = ""
    base_image: str = ""
    build_args: tuple[str, ...] = ()
    extra_ca: str = ""
    recorded: str = ""
    """The image a resumed run was launched in (its launch.json), instead of the others:
    taken as the boxes have it, else pulled from the stack's registry, else loaded
    from this machine's engine; never built."""


def image_on_box(box: Box, source: ImageSource) -> str:
    """The image (`source`) pushed to the stack's registry if it has one and brought
    onto the box; the name the box knows it by."""
    return image_on_boxes([box], source)


def image_on_boxes(boxes: list[Box], source: ImageSource) -> str:
    """`image_on_box` for every box of a stack: built and pushed once, then brought onto
    each box."""
    if source.recorded:
        return _recorded_on_boxes(boxes, source.recorded)
    local = (
        build.require_image(source.name)
        if source.name
        else build.ensure_built(
            source.base_image, list(source.build_args), source.extra_ca, force=False
        )
    )
    target = boxes[0].target
    remote = push_image(target, local) if target.registry else None
    return {ship_image(box, local, remote) for box in boxes}.pop()


def _recorded_on_boxes(boxes: list[Box], image: str) -> str:
    """A resumed run's own image on every box: a registry's name pulled, another loaded
    from here (`docker save`), where a box lacks it."""
    target = boxes[0].target
    in_registry = bool(target.registry) and image.startswith(f"{target.image_name}:")
    return {ship_image(box, image, image if in_registry else None) for box in boxes}.pop()
