"""The local target's box: this machine, its Docker engine driven by shell commands
here, without SSH.

`ThisMachine` answers what `ops.remote.ssh.Box` answers, as far as `fab` asks it: `run`
(through invoke, the library Fabric's own `run` is built on, so output, stdin and
errors behave the same), `run_with_input`, `exists`, `read_text`, `location`,
`dropped`. Files are read here directly. The box root is a directory of this machine
(`ops.target.local`), made before the first container starts (as a cloud box's setup
makes its own), never by a command that only looks (`fab status`, `runs`, `logs`); the
first command checks that the engine answers `docker info` (as a lab box's first connection
does, `ops.remote.lab_box`), so a stopped engine is one line, not a failed `docker ps`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from invoke import Context
from invoke.exceptions import Exit

from box import contract
from ops.remote import lab_box
from ops.remote.ssh import raise_for_remote_failure, run_command
from ops.target import local
from ops.target.schema import Target

SHELL = "/bin/bash"
STARTS_CONTAINER = re.compile(r"\bdocker (run|create)\b")


class ThisMachine:
    """Box 0, and the only box, of the local target."""

    address = "this machine"
    node = 0
    dropped = False
    """A command here cannot lose its connection."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.root = target.box_root
        self._shell = Context()
        self._engine_answered = False
        self._folders_made = False

    def _make_folders(self, command: str) -> None:
        """Before a container starts: it mounts the box root's folders and the store at
        their paths, which must be there and the user's (docker would make them as root)."""
        if self._folders_made or not STARTS_CONTAINER.search(command):
            return
        folders = [Path(self.root, directory) for directory in contract.USER_DIRS]
        storage = local.file_storage_dir(self.target.storage_uri)
        for folder in [*folders, *([Path(storage)] if storage else [])]:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise Exit(
                    f"{self.target.source}: cannot make {folder} ({error.strerror}); set "
                    "boxRoot and storageUri in a target file to directories you own"
                ) from None
        self._folders_made = True

    def run(self, command: str, *, check: bool = True, stdin: str | None = None, **kwargs):
        """Run `command` here (output hidden unless `hide=False`); one-line errors."""
        self._require_engine()
        self._make_folders(command)
        return run_command(self._shell, self, command, check=check, stdin=stdin, **kwargs)

    def _require_engine(self) -> None:
        if self._engine_answered:
            return
        result = self._shell.run(lab_box.DOCKER_INFO, hide=True, warn=True, in_stream=False)
        if result.exited != 0:
            said = lab_box.last_line(result.stderr + result.stdout, result.exited)
            raise Exit(
                f"this machine's Docker engine does not answer `docker info` ({said}); "
                "start it (`sudo systemctl start docker`) or let this user use it (the docker "
                "group, or DOCKER_HOST), then retry"
            )
        self._engine_answered = True

    def run_with_input(self, command: str, data: str, *, check: bool = True) -> tuple[int, str]:
        """Run `command` with `data` on its stdin, never on a command line; (exit code,
        output), one-line Exit on failure when `check`."""
        self._require_engine()
        self._make_folders(command)
        done = subprocess.run(
            [SHELL, "-c", command], input=data.encode(), capture_output=True, check=False
        )
        output = (done.stdout + done.stderr).decode(errors="replace")
        if check and done.returncode != 0:
            raise_for_remote_failure(self, command, done.returncode, output)
        return done.returncode, output

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it cannot be read (as `cat` fails)."""
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return None

    def location(self, path: str) -> str:
        """`path` as a user finds it: here, no host to name."""
        return path

    def close(self) -> None:
        """Nothing to close: no connection."""
