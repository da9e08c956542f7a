"""A local "box" for the `fab` tests: the sshd fixture, a BOX_ROOT in a temp dir, and
the real `fab` command line pointed at it through a target file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fixtures.sshd import SshServer, start_sshd
from tests.paths import REPO

FAB = Path(sys.executable).parent / "fab"
FAB_TIMEOUT_SECONDS = 600
STATUS_WAIT_SECONDS = 300


def wait_for_status(
    fab: Callable[..., subprocess.CompletedProcess], run_id: str, pattern: str, poll_s: float
) -> str:
    """`fab status --run` through `fab` until its output matches `pattern`; that output."""
    deadline, out = time.monotonic() + STATUS_WAIT_SECONDS, ""
    while time.monotonic() < deadline:
        out = fab("status", "--run", run_id).stdout
        if re.search(pattern, out):
            return out
        time.sleep(poll_s)
    raise AssertionError(f"status never matched {pattern!r}; last:\n{out}")


@dataclass
class LocalBox:
    """A target file describing `server` as a box, and a way to run `fab` against it."""

    server: SshServer
    root: Path
    target_file: Path
    known_hosts: Path
    env: dict[str, str] = field(default_factory=dict)

    def write_target(self, **overrides) -> None:
        outputs = {
            "cloud": "local",
            "hosts": [self.server.host],
            "sshUser": self.server.user,
            "sshPort": self.server.port,
            "sshKeyPath": str(self.server.client_key),
            "storageUri": f"file://{self.root.parent / 'storage'}",
            "registry": "",
            "imageRepository": "glucose-training",
            "vmSize": "local",
            "gpuCount": 0,
            "hourlyPriceUsd": 1.5,
            "spot": False,
            "boxRoot": str(self.root),
        }
        outputs.update(overrides)
        self.target_file.write_text(json.dumps(outputs, indent=2))

    def environment(self) -> dict[str, str]:
        """What `fab` needs in its environment to drive this box."""
        return {
            **os.environ,
            "GLUCOSE_TARGET": str(self.target_file),
            "GLUCOSE_KNOWN_HOSTS": str(self.known_hosts),
            "GLUCOSE_BOOT_WAIT_SECONDS": "20",
            "COLUMNS": "200",
            **self.env,
        }

    def fab(self, *args: str, timeout: float = FAB_TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        """Run the real `fab` from the repository root against this box."""
        return subprocess.run(
            [str(FAB), *args],
            cwd=REPO,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def make_local_box(server: SshServer, directory: Path) -> LocalBox:
    root = directory / "box-root"
    for sub in ("runs", "datasets", "watchdog"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "ready").write_text('{"gpu": "absent"}\n')
    box = LocalBox(
        server=server,
        root=root,
        target_file=directory / "target.json",
        known_hosts=directory / "known_hosts",
    )
    box.write_target()
    return box


@pytest.fixture
def local_box(sshd: SshServer, tmp_path: Path) -> LocalBox:
    """The session's sshd as a ready box with a fresh BOX_ROOT and known_hosts."""
    return make_local_box(sshd, tmp_path)


SECOND_BOX_HOST = "127.0.0.2"


def in_own_box_root(box_root: Path, own_root: Path) -> list[str]:
    """A command prefix that runs a program with `own_root` where `box_root` is: another
    box on this machine (a mount namespace of its own), for a target has one boxRoot."""
    bind = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, "sh",
            str(own_root), str(box_root)]  # fmt: skip


@dataclass
class TwoBoxes:
    """A stack of two boxes: box 0 `fab` connects to, box 1 only through box 0, each with
    its own BOX_ROOT at the one path the target names."""

    stack: LocalBox
    box_1: SshServer
    box_1_root: Path

    @property
    def roots(self) -> list[Path]:
        return [self.stack.root, self.box_1_root]


def start_two_boxes(box_0: LocalBox, directory: Path, environment: dict | None = None) -> TwoBoxes:
    """Box 1 beside `box_0`: sshd on 127.0.0.2 at box 0's port, the same client key."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: a second box needs root (a mount namespace of its own)")
    root = directory / "box-1-root"
    for sub in ("runs", "datasets", "watchdog"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "ready").write_text('{"gpu": "absent", "box": 1}\n')
    server = start_sshd(
        directory / "sshd-box-1",
        environment,
        host=SECOND_BOX_HOST,
        port=box_0.server.port,
        client_key=box_0.server.client_key,
        wrapper=in_own_box_root(box_0.root, root),
    )
    box_0.write_target(privateHosts=[box_0.server.host, SECOND_BOX_HOST])
    return TwoBoxes(box_0, server, root)


@pytest.fixture
def two_boxes(local_box: LocalBox, tmp_path: Path) -> Iterator[TwoBoxes]:
    """The session's sshd as box 0 and a fresh box 1 reached through it."""
    boxes = start_two_boxes(local_box, tmp_path)
    yield boxes
    boxes.box_1.stop()


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """The command failed with a one-line message (no traceback) naming `fragments`."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    message = lines[-1]
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.fixture(scope="session")
def tiny_image(docker_engine, tmp_path_factory) -> Iterator[str]:
    """A few-kB image made by `docker import` (no registry to pull from here)."""
    root = tmp_path_factory.mktemp("tiny-image")
    (root / "hello.txt").write_text("hello from a tiny image\n" * 100)
    name = f"glucose-fab-test-tiny:{uuid.uuid4().hex[:8]}"
    docker_engine.import_dir(root, name)
    yield name
    docker_engine.run(["image", "rm", "--force", name], timeout_seconds=120, check=False)


@dataclass
class RecordingTool:
    """A fake `docker`/`ssh` on PATH that records each call (argv, stdin, environment)."""

    name: str
    bin_dir: Path
    log: Path

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


RECORDER_SOURCE = """#!{python}
import json, os, sys
stdin = sys.stdin.read() if "--password-stdin" in sys.argv else ""
config = os.environ.get("DOCKER_CONFIG")
call = {{"argv": sys.argv[1:], "stdin": stdin, "docker_config": config,
        "config_mode": oct(os.stat(config).st_mode & 0o777) if config else None}}
with open({log!r}, "a") as log:
    log.write(json.dumps(call) + "\\n")
"""


@pytest.fixture
def recording_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`recording_tool("docker")`: a recorder named so, first on this process's PATH."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def install(name: str) -> RecordingTool:
        log = tmp_path / f"{name}-calls.jsonl"
        script = bin_dir / name
        script.write_text(RECORDER_SOURCE.format(python=sys.executable, log=str(log)))
        script.chmod(0o755)
        return RecordingTool(name, bin_dir, log)

    return install


@pytest.fixture(scope="session")
def probe_image(docker_engine, tmp_path_factory) -> Iterator[str]:
    """An image of nothing but the links a merged-/usr Debian has (`bin -> usr/bin`...):
    a container of it that mounts this machine's /usr read-only runs its shell."""
    root = tmp_path_factory.mktemp("probe-image")
    for link in ("bin", "lib", "lib64", "sbin"):
        (root / link).symlink_to(f"usr/{link}")
    (root / "usr").mkdir()
    name = f"glucose-fab-logs-probe:{uuid.uuid4().hex[:8]}"
    docker_engine.import_dir(root, name)
    yield name
    docker_engine.run(["image", "rm", "--force", name], timeout_seconds=120, check=False)
