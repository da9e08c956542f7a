"""A lab box: a machine `pulumi up` did not make, reached over SSH (a target file with
`hosts`).

No cloud-init sets it up, so there is no boot to wait out and no `ready` marker to
expect: it is ready when it answers SSH and its Docker engine answers `docker info`
(one with the marker, set up by hand with box/setup-box.sh, is ready as it is). One
that does not answer fails at the first try, naming the target file: a lab box down
is a fact to act on, not a VM that will be up in a minute.
"""

from __future__ import annotations

from invoke.exceptions import Exit

DOCKER_INFO = "docker info --format '{{.ServerVersion}}'"


def require_docker(connection, box) -> None:
    """Exit with one line unless the box's Docker engine answers its SSH user."""
    result = connection.run(DOCKER_INFO, hide=True, warn=True, in_stream=False)
    if result.exited == 0:
        return
    said = (result.stderr + result.stdout).strip().splitlines() or [f"exit {result.exited}"]
    raise Exit(
        f"box {box.address} ({box.target.source}) answers SSH but not `docker info` "
        f"({said[-1]}); install Docker there and let {box.target.ssh_user} use it "
        "(the docker group), then retry"
    )


def not_answering(box, why: str) -> str:
    """The one line for a lab box that does not answer SSH."""
    return (
        f"box {box.address} is down or out of reach ({why}); check that it is on and that "
        f"{box.target.source}'s hosts, sshPort and sshUser reach its sshd, then retry"
    )
