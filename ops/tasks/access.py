"""Reach the box yourself: a shell on it, or a run's TensorBoard through an SSH tunnel (on
this machine, the local target, TensorBoard needs no tunnel and a shell no SSH); or
every run of the stack in one TensorBoard here, from storage (ops.runs.board)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops.remote.boxes import AnyBox, box_for
from ops.remote.ssh import openssh_args
from ops.run import on_box
from ops.runs.listing import LOCAL_RUNS, local_dirs
from ops.target.forms import image_reference_ok
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from ops.tasks.runs import storage_uri_or_note
from ops.terminal_text import say_note

TENSORBOARD_PORT = 6006
MAX_PORT = 65535
console = Console(stderr=True, soft_wrap=True)


def _ssh_binary() -> str:
    binary = shutil.which("ssh")
    if binary is None:
        raise Exit("no `ssh` client on this machine; install OpenSSH (openssh-client)")
    return binary


@task(
    help={
        "command": "run this command instead of an interactive shell",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def ssh(c, command="", target="", stack=""):
    """Open a shell on the box."""
    where = resolve_target(target or None, stack or None)
    if where.this_machine:
        raise Exit(
            f"{where.source} is this machine: no box to SSH to; its runs are in "
            f"{where.box_root}/runs and `docker ps` lists their containers"
        )
    args = [_ssh_binary(), *openssh_args(where), *([command] if command else [])]
    os.execv(args[0], args)


def _port(text: object) -> int:
    """--port as a port number; one-line Exit for anything else."""
    try:
        port = int(str(text).strip())
    except ValueError:
        port = 0
    if not 1 <= port <= MAX_PORT:
        raise Exit(
            f"--port {text}: not a port; expected a whole number from 1 to {MAX_PORT} "
            f"(default {TENSORBOARD_PORT})"
        )
    return port


def _cache_folder(text: str) -> Path | None:
    """--cache as a folder that exists (made if missing); one-line Exit when it cannot be."""
    if not text:
        return None
    folder = Path(text).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise Exit(f"--cache {text} is a file; expected a folder for the gathered runs "
                   "(made if missing), or leave --cache out") from None  # fmt: skip
    except OSError as error:
        raise Exit(f"--cache {text}: cannot make that folder ({error.strerror}); expected a "
                   "folder you can write, or leave --cache out") from None  # fmt: skip
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Exit(f"--cache {text}: not a folder you can write; name another, or leave "
                   "--cache out")  # fmt: skip
    return folder


def _free_local_port(preferred: int) -> int:
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", preferred)) != 0:
            return preferred
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_tensorboard(box: AnyBox, run_id: str, port: int) -> str:
    """TensorBoard in a container from the run's own image, on the box's loopback only."""
    run_dir = contract.run_dir(box.root, run_id)
    record = box.read_text(f"{run_dir}/{contract.LAUNCH_FILE}")
    if record is None:
        raise Exit(
            f"run {run_id} has no {contract.LAUNCH_FILE} on {box.address}; was it started by fab?"
        )
    image = _launched_image(record)
    name = f"glucose-tensorboard-{run_id}"
    box.run(f"docker rm --force {name}", check=False)
    user = on_box.box_user(box)
    network = ["--network", "host"] if box.target.docker_network == "host" else []
    publish = [] if network else ["--publish", f"127.0.0.1:{port}:{port}"]
    inside = contract.workspace_path(contract.RUNS_DIR, run_id)
    command = [
        "docker", "run", "--detach", "--rm", "--name", name, "--user", user,
        "--env", "HOME=/tmp", *network, *publish,
        "--volume", f"{run_dir}:{inside}:ro",
        "--entrypoint", "tensorboard", image,
        "--logdir", f"{inside}/{contract.TB_DIR}", "--port", str(port),
        "--host", "127.0.0.1" if network else "0.0.0.0",
    ]  # fmt: skip
    box.run(shlex.join(command))
    return name


def _launched_image(record: str) -> str:
    """The image launch.json names. The run dir is the container's to write (and can be
    restored from the bucket), so the name is checked before it reaches `docker run`."""
    image = contract.LaunchRecord.parse(record).image
    if image is None or not image_reference_ok(image):
        raise Exit(
            f"{contract.LAUNCH_FILE} names no usable image ({image!r}); start TensorBoard by hand"
        )
    return image


@task(
    help={
        "run": "one run's TensorBoard on its box (default: every run of the stack, here)",
        "port": f"local port for the browser (default: {TENSORBOARD_PORT}, or a free one)",
        "local": f"without --run: a folder of runs to add (default: {LOCAL_RUNS}/, demo/runs/)",
        "cache": "without --run: the folder the runs are gathered in (default: under .cache/)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def tensorboard(c, run="", port=TENSORBOARD_PORT, local="", cache="", target="",
                stack=""):  # fmt: skip
    """Serve every run in one TensorBoard here (HParams: settings and final metrics)."""
    port = _port(port)
    if not run:
        from ops.runs import board  # TensorBoard's protocol buffers: seconds to import

        folder = _cache_folder(cache)
        notes: list[str] = []
        storage_uri = storage_uri_or_note(target, stack, notes)
        for note in notes:
            say_note(console, note)
        where = local_dirs(local)
        board.serve(storage_uri, where, _free_local_port(port), folder)
        return
    box = box_for(resolve_target(target or None, stack or None))
    run_id = on_box.resolve_run_id(box, run)
    local_port = _free_local_port(port)
    # This machine serves it on the browser's own port: nothing to tunnel.
    remote_port = local_port if box.target.this_machine else TENSORBOARD_PORT
    name = _start_tensorboard(box, run_id, remote_port)
    forward = f"{local_port}:127.0.0.1:{remote_port}"
    tunnel = [_ssh_binary(), "-N", "-o", "ExitOnForwardFailure=yes", "-L", forward]
    print(f"TensorBoard of run {run_id}: http://127.0.0.1:{local_port}/", flush=True)
    console.print(f"Ctrl-C stops TensorBoard on {box.address}")
    try:
        if box.target.this_machine:  # until Ctrl-C, which stops a subprocess.run's child too
            subprocess.run(["docker", "wait", name], check=False)
        else:
            subprocess.run([*tunnel, *openssh_args(box.target)], check=False)
    except KeyboardInterrupt:
        pass
    finally:
        box.run(f"docker rm --force {name}", check=False)
