"""ops.plan.render: the cost table fits the terminal it is shown on, and holds every
column where it is kept (a file, --json)."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ops.plan.estimate import PlanRequest, make_plan
from ops.plan.render import COLUMNS, plan_table
from ops.plan.throughput import load_measured
from stack import catalog
from tests.paths import REPO

PLAN = make_plan(
    PlanRequest(windows=600_000, epochs=100),
    catalog.sizes(include_retired=True),
    None,
    load_measured(),
)
ALWAYS = ("size", "GPU", "hours", "total $")
ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def _shown(width: int | None) -> list[str]:
    console = Console(width=width or 400, file=io.StringIO())
    console.print(plan_table(PLAN, width))
    return console.file.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_terminals_table_fits_it_whole_cells_and_the_total_kept(width):
    lines = _shown(width)
    assert max(map(len, lines)) <= width
    header = next(line for line in lines if " size " in line)
    assert all(name in header for name in ALWAYS)
    rows = [line for line in lines if "Standard_NC24ads_A100_v4" in line]
    assert rows and "…" not in rows[0]  # no cell cut short
    assert "columns left out to fit" in " ".join(lines)


def test_a_table_for_a_file_has_every_column():
    text = "\n".join(_shown(None))
    assert all(line in text for name, _, _ in COLUMNS for line in name.split("\n"))
    assert "left out" not in text


def test_fab_plan_on_a_100_column_terminal_fits_it():
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "50"}
    fab = Path(sys.executable).with_name("fab")
    command = [str(fab), "plan", "--milestone", "M1", "--epochs", "100"]
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=terminal) as done:
        os.close(terminal)  # the child holds it: reading ends when the child does
        shown = ANSI_STYLE.sub("", _read_until_closed(controller))
    assert done.returncode == 0
    lines = shown.splitlines()
    assert max(map(len, lines)) <= 100 and any("total $" in line for line in lines)


def _read_until_closed(controller: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    return b"".join(chunks).decode().replace("\r\n", "\n")
