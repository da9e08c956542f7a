"""Talking to the box over SSH: one Fabric connection with trust-on-first-use host keys.

Box K > 0 of a multi-node stack has no public address: its connection hops through
box 0 (Fabric's `gateway=`, SSH's ProxyJump) to its private address, with the same
key. Its host key is kept apart, per gateway (`.known_hosts.via-<box 0's address>`):
every stack's subnet is the same 10.42.0.0/24 and the clouds hand out its addresses in
order, so a private address names a box only together with the box 0 it is behind.

The first connection to a box records its host key in a project-local known_hosts
(`.known_hosts`, gitignored; `GLUCOSE_KNOWN_HOSTS` moves it); a later different key
is refused, because a box whose key changed under the same address is either a
re-created VM (forget the old line) or someone else's machine. While a fresh box is
still booting, connecting is retried with a visible wait until cloud-init has
written BOX_ROOT/ready (a target file that copies a stack's outputs gets a short
wait: its box is up or not). A lab box (a target file with `cloud: local`) has no
cloud-init and no marker to wait for: one try, ready once its Docker engine answers
(`ops.remote.lab_box`), else one line naming the target file.
"""

from __future__ import annotations

import io
import os
import shlex
import time
from pathlib import Path

import paramiko
from fabric import Connection
from invoke import Context, Result
from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from ops import CHECKOUT
from ops.cloud import api as power
from ops.remote import lab_box
from ops.target.schema import Target
from ops.terminal_text import log_text, printable

KNOWN_HOSTS_ENV = "GLUCOSE_KNOWN_HOSTS"
BOOT_WAIT_ENV = "GLUCOSE_BOOT_WAIT_SECONDS"
# Beside fabfile.py (the project root), wherever `fab` is run from.
DEFAULT_KNOWN_HOSTS = CHECKOUT / ".known_hosts"
# A fresh cloud VM takes 1-3 minutes to answer SSH and a few more for cloud-init
# (docker, NVIDIA toolkit); `fab train` right after `pulumi up` should just wait.
BOOT_WAIT_SECONDS = 600
# A target file's box is up or not: a retry or two covers a restarting sshd.
TARGET_FILE_WAIT_SECONDS = 15
CONNECT_TIMEOUT_SECONDS = 10
RETRY_PAUSE_SECONDS = 5
# Once SSH answers, checking for the marker is one cheap command: poll it faster.
READY_POLL_SECONDS = 1
KEEPALIVE_SECONDS = 15
DISK_FULL_MARKER = "No space left on device"

console = Console(stderr=True, soft_wrap=True)


def known_hosts_path(via: str | None = None) -> Path:
    """Where host keys are kept: of boxes reached directly, or of those behind `via`."""
    path = Path(os.environ.get(KNOWN_HOSTS_ENV) or DEFAULT_KNOWN_HOSTS)
    return path.with_name(f"{path.name}.via-{via}") if via else path


def boot_wait_seconds(target: Target) -> float:
    """How long to wait for a box that does not answer yet, or lacks its ready marker;
    a lab box gets no wait: it is not booting because of us, it answers or it is down."""
    if not target.set_up_by_cloud_init:
        return 0.0
    default = BOOT_WAIT_SECONDS if target.target_file is None else TARGET_FILE_WAIT_SECONDS
    return float(os.environ.get(BOOT_WAIT_ENV) or default)


class Box:
    """Box `node` of a target (box 0 by default): `run` shell commands there, lazily
    connected."""

    def __init__(self, target: Target, node: int = 0, boot_wait_s: float | None = None) -> None:
        self.target = target
        self.node = node
        # How long to wait for a box that does not answer yet (booting) before giving up.
        self.boot_wait_s = boot_wait_seconds(target) if boot_wait_s is None else boot_wait_s
        self.host, self.gateway_host = target.ssh_route(node)
        self.root = target.box_root
        self._connection: Connection | None = None

    @property
    def address(self) -> str:
        address = f"{self.target.ssh_user}@{self.host}:{self.target.ssh_port}"
        return f"{address} via {self.gateway_host}" if self.gateway_host else address

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = self._connect_when_up()
        return self._connection

    @property
    def dropped(self) -> bool:
        """The connection was open and is not any more: the box went away mid-command."""
        connection = self._connection
        return bool(connection and connection.transport and not connection.is_connected)

    def location(self, path: str) -> str:
        """`path` on this box, as scp writes it."""
        return f"{self.target.ssh_user}@{self.host}:{path}"

    def run(self, command: str, *, check: bool = True, stdin: str | None = None, **kwargs):
        """Run `command` on the box (output hidden unless `hide=False`); one-line errors."""
        return run_command(self.connection, self, command, check=check, stdin=stdin, **kwargs)

    def run_with_input(self, command: str, data: str, *, check: bool = True) -> tuple[int, str]:
        """Run `command` with `data` on its stdin at the channel's speed (invoke feeds a
        stream one byte per 10 ms) and no copy of `data` anywhere but the channel: how
        secrets and tokens reach the box. (exit code, output); one-line Exit on failure
        when `check`."""
        channel = self.connection.client.get_transport().open_session()
        try:
            channel.exec_command(command)
            channel.sendall(data.encode())
            channel.shutdown_write()
            output = channel.makefile("rb").read() + channel.makefile_stderr("rb").read()
            exit_code = channel.recv_exit_status()
        finally:
            channel.close()
        text = output.decode(errors="replace")
        if check and exit_code != 0:
            raise_for_remote_failure(self, command, exit_code, text)
        return exit_code, text

    def exists(self, path: str) -> bool:
        return self.run(f"test -e {shlex.quote(path)}", check=False).exited == 0

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist."""
        result = self.run(f"cat {shlex.quote(path)}", check=False)
        return result.stdout if result.exited == 0 else None

    def close(self) -> None:
        if self._connection is not None:
            _close(self._connection)
            self._connection = None

    def _connect_when_up(self) -> Connection:
        # A stopped cloud box never answers: say so in seconds, not after the boot wait.
        power.require_up(self.target, sorted({0, self.node}))
        deadline = time.monotonic() + self.boot_wait_s
        with console.status(f"connecting to {self.address}") as status:
            connection = _open_with_retries(self, deadline, status)
            ready = f"{self.root}/{contract.READY_MARKER}"
            waiting_for = f"{ready} (cloud-init still running)"
            while not _remote_exists(connection, ready):
                _raise_if_setup_failed(connection, self)
                if not self.target.set_up_by_cloud_init:  # no cloud-init will write it
                    lab_box.require_ready(connection, self)
                    break
                _wait_or_give_up(deadline, waiting_for, self, status, READY_POLL_SECONDS)
        return connection


def _new_connection(
    target: Target, host: str, gateway: Connection | None = None, via: str | None = None
) -> Connection:
    connect_kwargs: dict = {"allow_agent": True, "look_for_keys": True}
    if target.ssh_key_path is not None:
        if not target.ssh_key_path.exists():
            raise Exit(
                f"SSH key {target.ssh_key_path} ({target.source}: sshKeyPath) does not exist; "
                "point sshKeyPath at the private key whose public half the box trusts"
            )
        connect_kwargs = {
            "key_filename": str(target.ssh_key_path),
            "allow_agent": False,
            "look_for_keys": False,
        }
    connection = Connection(
        host,
        user=target.ssh_user,
        port=target.ssh_port,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        connect_kwargs=connect_kwargs,
        gateway=gateway,
    )
    path = known_hosts_path(via)
    path.touch(mode=0o600, exist_ok=True)
    # load_host_keys also makes paramiko save newly accepted keys to this file.
    connection.client.load_host_keys(str(path))
    connection.client.set_missing_host_key_policy(_TrustOnFirstUse(path))
    return connection


class _TrustOnFirstUse(paramiko.AutoAddPolicy):
    """Accept and record an unknown host's key, saying so (a changed key never gets here)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        console.print(
            f"[yellow]trusting new host key of {hostname}[/] "
            f"({key.get_name()} {key.get_fingerprint().hex()}), recorded in {self.path}"
        )
        super().missing_host_key(client, hostname, key)


def _open_with_retries(box: Box, deadline: float, status) -> Connection:
    attempt = 0
    while True:
        attempt += 1
        gateway = box.gateway_host and _new_connection(box.target, box.gateway_host)
        connection = _new_connection(box.target, box.host, gateway or None, box.gateway_host)
        try:
            connection.open()
            connection.transport.set_keepalive(KEEPALIVE_SECONDS)
            return connection
        except paramiko.BadHostKeyException as error:
            raise Exit(_changed_key_message(box, error)) from None
        except paramiko.AuthenticationException:
            raise Exit(_wrong_key_message(box)) from None
        except (OSError, paramiko.SSHException, EOFError) as error:
            # Refused / timed out / banner not sent yet: the VM is still booting.
            _close(connection)
            reason = f"SSH not answering ({type(error).__name__}), attempt {attempt}"
            _wait_or_give_up(deadline, reason, box, status)


def _close(connection: Connection) -> None:
    """Close `connection` and the gateway it hopped through (Fabric leaves that open)."""
    connection.close()
    if isinstance(connection.gateway, Connection):
        connection.gateway.close()


def _wait_or_give_up(
    deadline: float, waiting_for: str, box: Box, status, pause_seconds: float = RETRY_PAUSE_SECONDS
) -> None:
    """Pause before the next try, or Exit: the box is down."""
    left_seconds = deadline - time.monotonic()
    if left_seconds <= 0 and not box.target.set_up_by_cloud_init:
        raise Exit(lab_box.not_answering(box, waiting_for))
    if left_seconds <= 0:
        raise Exit(_down_message(box, waiting_for))
    status.update(f"waiting for {box.address}: {waiting_for}; giving up in {left_seconds:.0f} s")
    time.sleep(min(pause_seconds, max(left_seconds, 0.1)))


def _down_message(box: Box, waiting_for: str) -> str:
    if box.target.target_file is None:  # a stack's box: booting, stopped or replaced
        fix = (
            "check `pulumi stack output hosts` and that the VM is running (a stopped box is "
            "started with `pulumi up` or the cloud console), then retry"
        )
    else:
        fix = f"start it and its sshd, or fix hosts/sshPort in {box.target.source}"
    return (
        f"box {box.address} is down or not ready ({waiting_for}) after "
        f"{box.boot_wait_s:.0f} s; {fix}"
    )


def _raise_if_setup_failed(connection: Connection, box: Box) -> None:
    """The box's setup wrote a `failed` marker (box/setup-box.sh): say so now."""
    marker = f"{box.root}/{contract.FAILED_MARKER}"
    result = connection.run(f"cat {shlex.quote(marker)}", hide=True, warn=True, in_stream=False)
    if result.exited != 0:
        return
    lines = result.stdout.strip().splitlines() or ["(empty marker)"]
    console.print(log_text("\n".join(lines[1:])), markup=False, highlight=False)
    said = printable(lines[0], lab_box.LINE_CHARACTERS)
    raise Exit(f"box {box.address} failed to set up: {said} (log tail above; {marker})")


def _remote_exists(connection: Connection, path: str) -> bool:
    result = connection.run(f"test -e {shlex.quote(path)}", hide=True, warn=True, in_stream=False)
    return result.exited == 0


def _changed_key_message(box: Box, error: paramiko.BadHostKeyException) -> str:
    # paramiko's name for the key, `[host]:port` off port 22: box 0's when the hop to a
    # private box failed at its gateway.
    name = error.hostname
    gateway = box.gateway_host
    at_gateway = gateway is not None and name in (gateway, f"[{gateway}]:{box.target.ssh_port}")
    path = known_hosts_path(None if at_gateway else box.gateway_host)
    return (
        f"refusing to connect: the host key of {name} changed "
        f"(recorded {error.expected_key.get_fingerprint().hex()}, "
        f"offered {error.key.get_fingerprint().hex()}); if the box was re-created, forget "
        f"the old key with `ssh-keygen -R '{name}' -f {path}` and retry"
    )


def _wrong_key_message(box: Box) -> str:
    key = box.target.ssh_key_path or "your default SSH keys"
    return (
        f"box {box.address} refused SSH key {key}; expected the key whose public half is "
        f"the stack's sshPublicKey; set sshKeyPath in the target file or load it in ssh-agent"
    )


def run_command(
    runner: Connection | Context, box, command: str, *, check: bool, stdin: str | None, **kwargs
) -> Result:
    """`runner.run(command)` (a Fabric Connection, or an invoke Context on this machine)
    as every box runs commands: output hidden unless `hide=False`, `stdin` fed as text,
    never the terminal's; one-line errors when `check`."""
    kwargs.setdefault("hide", True)
    if stdin is not None:
        kwargs["in_stream"] = io.StringIO(stdin)
    else:
        kwargs.setdefault("in_stream", False)
    result = runner.run(command, warn=True, **kwargs)
    if check and result.exited != 0:
        raise_for_remote_failure(box, command, result.exited, result.stderr + result.stdout)
    return result


def raise_for_remote_failure(box: Box, command: str, exit_code: int, output: str) -> None:
    """Turn a failed remote command into one line; disk-full gets its own advice."""
    if DISK_FULL_MARKER in output:
        raise Exit(
            f"the box's disk is full ({box.address}: {DISK_FULL_MARKER}); free space with "
            f"`fab ssh` then `docker system prune -a` and old runs under {box.root}/runs, "
            "or give the box a bigger disk"
        )
    said = lab_box.last_line(output, exit_code)
    program = command.split()[0] if command.split() else command
    raise Exit(f"on {box.address}, `{program} ...` exited {exit_code}: {said}")


def openssh_args(target: Target) -> list[str]:
    """`ssh` options with the same trust rules: our known_hosts, new keys accepted once."""
    args = [
        "-p", str(target.ssh_port),
        "-o", f"UserKnownHostsFile={known_hosts_path().resolve()}",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", "HashKnownHosts=no",  # readable lines, as paramiko writes them
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_SECONDS}",
    ]  # fmt: skip
    if target.ssh_key_path is not None:
        args += ["-i", str(target.ssh_key_path), "-o", "IdentitiesOnly=yes"]
    # The user as the value of -l and the host after `--`: neither can be read as an
    # option (`-oProxyCommand=...` would run a command here), whatever the target says.
    return [*args, "-l", target.ssh_user, "--", target.host]
