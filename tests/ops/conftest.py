"""A local "box" for the `fab` tests: the sshd fixture, a BOX_ROOT in a temp dir, and
the real `fab` command line pointed at it through a target file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fixtures.sshd import SshServer

REPO_ROOT = Path(__file__).resolve().parents[2]
FAB = Path(sys.executable).parent / "fab"
FAB_TIMEOUT_SECONDS = 600


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
            cwd=REPO_ROOT,
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
