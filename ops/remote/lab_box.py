"""A lab box: a machine `pulumi up` did not make, reached over SSH (a target file with
`hosts` and `cloud: local`, or no `cloud`).

No cloud-init sets it up, so there is no boot to wait out and no `ready` marker to
expect: it is ready when it answers SSH, its Docker engine answers `docker info` and
the SSH user can make the box root's folders (one with the marker, set up with
box/setup-box.sh, is ready as it is). One that does not answer fails at the first
try, naming the target file: a lab box down is a fact to act on, not a VM that will be
up in a minute.
"""

from __future__ import annotations

import shlex

from fabric import Connection
from invoke.exceptions import Exit

from box import contract
from ops.terminal_text import printable

DOCKER_INFO = "docker info --format '{{.ServerVersion}}'"
LINE_CHARACTERS = 400
"""Of a box's line a one-line error quotes."""


def require_ready(connection: Connection, box) -> None:
    """Exit with one line unless the box's Docker engine answers its SSH user and the
    box root's folders are (or can be made) the user's; `box` is an `ops.remote.ssh.Box`."""
    result = connection.run(DOCKER_INFO, hide=True, warn=True, in_stream=False)
    if result.exited != 0:
        said = last_line(result.stderr + result.stdout, result.exited)
        raise Exit(
            f"box {box.address} ({box.target.source}) answers SSH but not `docker info` "
            f"({said}); install Docker there and let {box.target.ssh_user} use it "
            "(the docker group), then retry"
        )
    folders = [f"{box.root}/{name}" for name in contract.USER_DIRS]
    made = connection.run(
        f"mkdir -p {' '.join(shlex.quote(folder) for folder in folders)}",
        hide=True,
        warn=True,
        in_stream=False,
    )
    if made.exited != 0:
        said = last_line(made.stderr + made.stdout, made.exited)
        raise Exit(
            f"box {box.address} ({box.target.source}): {box.target.ssh_user} cannot make "
            f"{box.root}'s folders ({said}); set boxRoot in the target file to a directory "
            f"{box.target.ssh_user} owns, or there run `sudo install -d -o "
            f"{box.target.ssh_user} {' '.join(folders)}`"
        )


def not_answering(box, why: str) -> str:
    """The one line for a lab box that does not answer SSH."""
    return (
        f"box {box.address} is down or out of reach ({why}); check that it is on and that "
        f"{box.target.source}'s hosts, sshPort and sshUser reach its sshd, then retry"
    )


def last_line(output: str, exit_code: int) -> str:
    """What a failed command said last: the line a one-line error quotes, made safe to
    print (the box's words)."""
    return printable((output.strip().splitlines() or [f"exit {exit_code}"])[-1], LINE_CHARACTERS)
