"""ops.plan.render: the cost table fits 100 columns, or a narrower terminal saying what it
left out, its title saying what the mark means; `--wide` holds every column and the
notes, `--explain` the notes; no title or caption line is half a phrase. The price
snapshot's age is told against a given day."""

from __future__ import annotations

import dataclasses
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from datetime import date
from pathlib import Path

import pytest

from ops.plan.estimate import PlanRequest, make_plan
from ops.plan.pricing import HourlyPrice, months_between
from ops.plan.render import COLUMNS, DEFAULT, print_plan
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
FAB = Path(sys.executable).with_name("fab")
SNAPSHOT_DAY = min(PLAN.snapshot_dates)  # the oldest price dates the plan's warning
SNAPSHOT_DATE = date.fromisoformat(SNAPSHOT_DAY)


def _printed(
    plan=PLAN, wide=False, terminal_width=None, today=SNAPSHOT_DATE, explain=False
) -> list[str]:
    out = io.StringIO()  # not a terminal: as `fab plan > file` prints
    print_plan(plan, wide, out, terminal_width, today, explain)
    return out.getvalue().splitlines()


def _headers(names) -> list[str]:
    return [line for name in names for line in name.split("\n") if line]


def _fab_plan(*args: str) -> subprocess.CompletedProcess:
    command = [str(FAB), "plan", "--milestone", "M3", "--epochs", "100", *args]
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("width", [60, 80, 90])
def test_a_narrow_terminals_table_fits_it_and_says_how_to_see_the_rest(width):
    lines = _printed(terminal_width=width)
    assert max(map(len, lines)) <= width
    header = next(line for line in lines if " size " in line)
    assert all(name in header for name in ALWAYS)
    rows = [line for line in lines if "Standard_NC24ads_A100_v4" in line]
    assert rows and "…" not in rows[0]  # no cell cut short
    caption = " ".join(" ".join(lines).split())
    assert "Left out to fit: spot $" in caption and "--wide: every column" in caption


def test_a_piped_fab_plan_fits_100_columns_with_the_columns_a_choice_needs():
    done = _fab_plan("--deadline", "4", "--sweep", "40")  # wide cells: late, 4-digit $
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    header = next(line for line in lines if " size " in line)
    assert header.split() == ["size", "GPU", "throughput", "hours", "spot", "$",
                              "total", "$"]  # fmt: skip
    assert any(line.startswith("late ") for line in lines)
    assert "--wide: every column and the notes;" in done.stdout


def test_fab_plan_wide_has_every_column_and_leaves_nothing_out():
    done = _fab_plan("--wide")
    assert done.returncode == 0, done.stderr
    head = "\n".join(done.stdout.splitlines()[:8])
    assert all(line in head for line in _headers(name for name, _, _ in COLUMNS))
    assert "Left out" not in done.stdout and "--wide:" not in done.stdout


def test_the_wide_table_has_every_column_at_any_terminal_width():
    text = "\n".join(_printed(wide=True, terminal_width=80))
    assert all(line in text for line in _headers(name for name, _, _ in COLUMNS))


def test_the_default_table_has_each_default_column_and_says_how_to_see_the_rest():
    lines = _printed()
    header = next(line for line in lines if " size " in line)
    assert all(name in header for name in _headers(DEFAULT))
    assert "--wide: every column and the notes; --explain: the notes" in "\n".join(lines)


def test_the_notes_say_the_price_snapshots_date():
    assert f"snapshot {SNAPSHOT_DAY}" in " ".join(_printed(explain=True))


@pytest.mark.parametrize(
    ("snapshot", "today", "months"),
    [("2025-07-01", "2026-01-01", 6), ("2025-07-01", "2025-12-31", 5),
     ("2025-07-31", "2026-01-30", 5), ("2025-07-01", "2026-11-26", 16)],
)  # fmt: skip
def test_a_snapshots_age_is_whole_calendar_months(snapshot, today, months):
    assert months_between(date.fromisoformat(snapshot), date.fromisoformat(today)) == months


def test_a_snapshot_six_months_old_is_warned_in_one_line_with_the_fix():
    today = SNAPSHOT_DATE.replace(year=SNAPSHOT_DATE.year + 1)
    warnings = [line for line in _printed(today=today) if "warning" in line.lower()]
    assert warnings == [
        f"warning: the price snapshot is from {SNAPSHOT_DAY}, 12 months ago: make prices, or --live"
    ]


def test_a_snapshot_under_six_months_old_is_not_warned():
    today = date.fromordinal(SNAPSHOT_DATE.toordinal() + 150)
    assert not any("warning" in line.lower() for line in _printed(today=today))


def test_a_plan_priced_live_has_no_snapshot_age_to_warn_of():
    sizes = catalog.sizes()
    live = {s.name: HourlyPrice(1.0, None, s.price_region, "live 2026-11-26") for s in sizes}
    plan = make_plan(PlanRequest(windows=600_000, epochs=1), sizes, live, load_measured())
    today = SNAPSHOT_DATE.replace(year=SNAPSHOT_DATE.year + 5)
    assert plan.snapshot_dates == ()
    assert not any("warning" in line.lower() for line in _printed(plan, today=today))


def test_fab_plan_on_a_100_column_terminal_fits_it():
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "50"}
    command = [str(FAB), "plan", "--milestone", "M1", "--epochs", "100"]
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


@pytest.mark.parametrize(("graph", "step"), [(True, "captured"), (False, "eager")])
def test_the_title_names_the_step_every_row_assumes(graph, step):
    plan = make_plan(
        PlanRequest(windows=600_000, epochs=100, graph=graph),
        catalog.sizes(),
        None,
        load_measured(),
    )
    title = " ".join(" ".join(_printed(plan)[:3]).split())
    assert f"{step} step, sorted by" in title
    assert {row.step for row in plan.rows} == {step}


def test_fab_plan_json_says_each_rows_step_and_source():
    done = _fab_plan("--no-graph", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert {row["step"] for row in rows} == {"eager"}
    assert {row["throughput_source"] for row in rows} <= {
        "measured",
        "scaled from 1x measured",
        "modelled",
        "estimated",
    }


def test_the_title_says_what_the_mark_means_with_no_footer():
    lines = _printed()
    header_at = next(i for i, line in enumerate(lines) if " size " in line)
    assert "✔ cheapest" in " ".join(lines[:header_at])
    assert "✔" not in " ".join(lines[header_at + 2 :]).replace("✔  Standard_NC4as_T4_v3", "")


def test_a_deadlines_title_says_what_both_marks_mean():
    plan = make_plan(
        PlanRequest(windows=600_000, epochs=100, deadline_hours=0.4),
        catalog.sizes(),
        None,
        load_measured(),
    )
    title = " ".join(" ".join(_printed(plan)[:3]).split())
    assert "✔ cheapest within 0.4 h, late: over it" in title


def test_the_notes_come_with_explain_or_wide_only():
    notes = ("Prices:", "Hours include", "Storage+egress:", "Not offered (retired):")
    for printed, told in [
        (_printed(), False),
        (_printed(explain=True), True),
        (_printed(wide=True), True),
    ]:
        text = "\n".join(printed)
        assert all((note in text) == told for note in notes), (told, text[-400:])


def test_the_default_plan_is_the_table_and_one_caption():
    lines = _printed(today=SNAPSHOT_DATE)
    rows = [line for line in lines if any(row.size in line for row in PLAN.rows)]
    assert len(lines) - len(rows) <= 6  # title, header, rule, caption


def _fab_plan_on_a_terminal(columns: int, *args: str) -> list[str]:
    """`fab plan` on a terminal `columns` wide, as a person runs it."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50"}
    command = [str(FAB), "plan", "--milestone", "M1", "--epochs", "100", *args]
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=terminal) as done:
        os.close(terminal)
        shown = ANSI_STYLE.sub("", _read_until_closed(controller))
    assert done.returncode == 0
    return shown.splitlines()


@pytest.mark.parametrize("columns", [80, 100, 200])
def test_fab_plan_leaves_no_half_phrase_on_a_line_of_its_own(columns):
    lines = _fab_plan_on_a_terminal(columns)
    assert max(map(len, lines)) <= columns
    # A table row or header has four words or more; a title or caption line broken
    # inside a phrase leaves one or two ("egress $").
    words = [line for line in lines if set(line.strip()) != {"─"}]  # not the header's rule
    assert [line for line in words if 0 < len(line.split()) < 3] == []
    text = "\n".join(lines)
    for phrase in ("✔ cheapest", "--wide: every column", "--explain: the notes"):
        assert phrase in text


@pytest.mark.parametrize("columns", [80, 100])
def test_fab_plan_explain_fits_the_terminal(columns):
    lines = _fab_plan_on_a_terminal(columns, "--explain")
    assert max(map(len, lines)) <= columns
    assert any(line.startswith("Hours include") for line in lines)


def test_a_box_whose_one_gpu_was_measured_is_scaled_not_measured():
    rows = {row.size: row for row in PLAN.rows}
    assert rows["p5.4xlarge"].throughput_source == "measured"  # one H100, measured
    assert rows["p5.48xlarge"].throughput_source == "scaled from 1x measured"
    assert rows["Standard_ND96isr_H100_v5"].throughput_source == "scaled from 1x measured"


def test_a_box_measured_at_its_own_gpu_count_is_measured():
    request = PlanRequest(windows=600_000, epochs=100)
    scaled = {row.size: row for row in make_plan(request, catalog.sizes()).rows}["p5.48xlarge"]
    one = next(
        row for row in load_measured() if row.gpu_count == 1 and row.step.startswith("graph")
    )
    # Measured on eight GPUs at the share of the global batch each takes for this data.
    eight = dataclasses.replace(
        one,
        gpu_count=8,
        batch_size=scaled.per_gpu_batch,
        train_windows_per_s=one.train_windows_per_s * 7,
    )
    plan = make_plan(request, catalog.sizes(), None, (*load_measured(), eight))
    assert {row.size: row for row in plan.rows}["p5.48xlarge"].throughput_source == "measured"
