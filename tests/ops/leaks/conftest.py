"""A stack folder for `fab leaks`: Pulumi.yaml and one Pulumi.<stack>.yaml, as a project
keeps them after `pulumi destroy` (no outputs anywhere), and `fab leaks` run from it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ops.conftest import FAB
from tests.paths import REPO

STACK = "dev"
COST_SCOPE = f"glucose-training/{STACK}"
FAB_LEAKS_TIMEOUT_SECONDS = 240


def write_stack(folder: Path, cloud: str, region: str | None, stack: str = STACK) -> Path:
    (folder / "Pulumi.yaml").write_text("name: glucose-training\nruntime: python\n")
    region_key = {"aws": "aws:region", "azure": "azure-native:location"}[cloud]
    lines = ["config:", f"  glucose-training:cloud: {cloud}"]
    lines += [f"  {region_key}: {region}"] if region else []
    path = folder / f"Pulumi.{stack}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def report_line(out: str, ident: str) -> str:
    """The report's one line of the leftover `ident` (its second column)."""
    rows = [line for line in out.splitlines() if line.startswith("  ")]
    (line,) = [row for row in rows if re.split(r"\s{2,}", row.strip())[1] == ident]
    return line


def assert_listed(done: subprocess.CompletedProcess, left: dict[str, str]) -> None:
    """Exit 1, and each leftover (kind -> id) on its own line, under its kind."""
    assert done.returncode == 1, done.stdout + done.stderr
    for kind, ident in left.items():
        assert report_line(done.stdout, ident).lstrip().startswith(kind), done.stdout
    assert "run `fab leaks` again" in done.stderr


@pytest.fixture
def fab_leaks(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """`fab leaks ARGS` run in `tmp_path` (the stack folder), the repo's fabfile."""

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [str(FAB), "--search-root", str(REPO), "leaks", *args]
        return subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=FAB_LEAKS_TIMEOUT_SECONDS
        )

    return run
