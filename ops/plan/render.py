"""How a cost plan reads: the table of every size, and the notes of what it assumes.

The default table fits 100 columns (a terminal, a file, an issue comment) with what a
choice rests on, its title saying what the mark means; `--wide` adds the columns that
explain it and the notes, `--explain` the notes alone. A narrower terminal gets fewer
columns and a caption naming them and how to see them, never cut cells; a title or
caption breaks between phrases, never inside one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import date, datetime, timezone
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from ops.plan.estimate import Plan, PlanRow
from ops.plan.pricing import snapshot_age_warning
from ops.plan.throughput import STEP_NAMES

# What a default table fits, piped or not: the width of a review pane or an issue.
DEFAULT_COLUMNS = 100


def _money(usd: float | None) -> str:
    return "—" if usd is None else f"{usd:,.2f}"


def _per_million(usd: float | None) -> str:
    return "—" if usd is None else f"{usd:.4f}"


def _rate(windows_per_s: float) -> str:
    if windows_per_s >= 1e6:
        return f"{windows_per_s / 1e6:.2f}M"
    return f"{windows_per_s / 1e3:,.0f}k" if windows_per_s >= 1e4 else f"{windows_per_s:,.0f}"


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours >= 10 else f"{hours:.2f}"


def _batch(row: PlanRow) -> str:
    """The global batch, a GPU's share where several share it, `!` where it departs
    from the rule's (the notes say why)."""
    share = f" ({row.per_gpu_batch}/GPU)" if row.per_gpu_batch != row.global_batch else ""
    return f"{row.global_batch}{share}{'!' if row.batch_departs else ''}"


def _mark(row: PlanRow) -> str:
    return "✔" if row.pick else ("" if row.within_deadline else "late")


# Every column (`--wide`): header, its cell of a row, and whether it is a number.
COLUMNS: tuple[tuple[str, Callable[[PlanRow], str], bool], ...] = (
    ("", _mark, False),
    ("cloud", lambda row: row.cloud, False),
    ("size", lambda row: row.size, False),
    ("GPU", lambda row: row.gpu, False),
    ("prec", lambda row: row.precision, False),
    ("windows/s", lambda row: _rate(row.windows_per_s), True),
    ("throughput", lambda row: row.throughput_source, False),
    ("step", lambda row: row.step, False),
    ("batch", _batch, True),
    ("hours", lambda row: _hours(row.hours), True),
    ("on-demand $", lambda row: _money(row.on_demand_usd), True),
    ("spot $", lambda row: _money(row.spot_usd), True),
    ("$ per M\nwindow-passes", lambda row: _per_million(row.usd_per_million_window_passes), True),
    ("storage +\negress $", lambda row: _money(row.storage_egress_usd), True),
    ("total $", lambda row: _money(row.total_usd), True),
)
# The default table: the choice (mark, size, GPUs, hours, total) and how the speed behind
# the hours was known, beside the other market's dollars (the sorting market's are the
# total less storage: the same column twice). The cloud shows in the size's name; the
# step every row assumes and what the mark means, in the title.
DEFAULT = ("", "size", "GPU", "throughput", "hours", "total $")
OTHER_MARKET = {"on-demand": "spot $", "spot": "on-demand $"}

# Measures a table's natural width (a console's own width would cap the measurement).
_UNBOUNDED = Console(width=10_000)


def table_width(table: Table) -> int:
    """Columns the table takes with no cell cut or wrapped."""
    return _UNBOUNDED.measure(table).maximum


def default_headers(plan: Plan) -> tuple[str, ...]:
    """The default table's columns for `plan`: DEFAULT with the other market's dollars
    before the total."""
    return (*DEFAULT[:-1], OTHER_MARKET[plan.price_basis], DEFAULT[-1])


def plan_table(
    plan: Plan, width: int | None = DEFAULT_COLUMNS, wide: bool = False, explain: bool = False
) -> Table:
    """Every size's row, cheapest first, the pick marked: every column when `wide`, else
    the default ones, less those a `width` narrower than theirs cannot hold (cells never
    wrap: a cut number misleads). `explain`: the notes follow, the caption need not
    point to them."""
    if wide:
        return _table(plan, [h for h, _, _ in COLUMNS], (), explain=True)
    shown = default_headers(plan)
    # What a terminal under 100 columns does without, first to last; the mark, size,
    # GPU, hours and total always stay.
    droppable = (OTHER_MARKET[plan.price_basis], "throughput")
    for dropped in range(len(droppable) + 1):
        left_out = droppable[:dropped]
        table = _table(plan, [h for h in shown if h not in left_out], left_out, explain)
        if width is None or table_width(table) <= width:
            break
    return table


def lines_of(phrases: list[str], width: int) -> str:
    """`phrases` joined by spaces into lines of at most `width`, broken only between
    phrases: a caption or title never leaves half a phrase ("egress $") on a line of its
    own. A phrase longer than `width` has a line to itself."""
    lines: list[str] = []
    for phrase in phrases:
        if lines and len(lines[-1]) + 1 + len(phrase) <= width:
            lines[-1] += " " + phrase
        else:
            lines.append(phrase)
    return "\n".join(lines)


def _title_phrases(plan: Plan) -> list[str]:
    r = plan.request
    sweep = f"a sweep of {r.sweep_trials} trials, each " if r.sweep_trials else ""
    mark = "✔ cheapest"
    if r.deadline_hours:
        mark = f"✔ cheapest within {r.deadline_hours:g} h, late: over it"
    return [
        f"{sweep}{r.windows:,} windows x {r.epochs} epochs (L={r.window_length}),",
        f"{STEP_NAMES[r.step]} step,",
        f"sorted by {plan.price_basis} total;",
        mark,
    ]


def _caption_phrases(left_out: tuple[str, ...], wide: bool, explain: bool) -> list[str]:
    """Which columns are not shown and how to see them, and how to see the notes."""
    phrases = [f"Left out to fit: {', '.join(left_out)};"] if left_out else []
    if not wide:
        phrases.append(
            "--wide: every column;" if explain else "--wide: every column and the notes;"
        )
    if not explain:
        phrases.append("--explain: the notes (prices, speeds, setup, storage)")
    return [*phrases[:-1], phrases[-1].removesuffix(";")] if phrases else []


def _table(plan: Plan, headers: list[str], left_out: tuple[str, ...], explain: bool) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,  # a rule under the header, no others: room for columns
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    columns = [column for column in COLUMNS if column[0] in headers]
    for name, _, numeric in columns:
        table.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=True,
            min_width=max(len(line) for line in name.split("\n")),
        )
    for row in plan.rows:
        table.add_row(*(cell(row) for _, cell, _ in columns))
    # Title and caption are broken between phrases at the table's own width.
    width = table_width(table)
    table.title = lines_of(_title_phrases(plan), width)
    wide = len(columns) == len(COLUMNS)
    if caption := _caption_phrases(left_out, wide, explain):
        table.caption = lines_of(caption, width)
    return table


def _per_cloud(prices: dict[str, float]) -> str:
    return ", ".join(f"{cloud} ${usd:g}" for cloud, usd in prices.items())


def footer_lines(plan: Plan) -> list[str]:
    """What the figures assume, and where prices and throughput came from."""
    a = plan.assumptions
    sources = sorted({f"{r.cloud}: {r.price_source} ({r.price_region})" for r in plan.rows})
    lines = [
        "Prices: " + "; ".join(sources) + ". Spot prices move hourly.",
        f"Windows/s at the trainer's default batch for the data ({a['one_gpu_batch']} on one "
        "GPU, less where the GPU's memory holds less); measured rows come from "
        "ops/plan/measured_throughput.csv at their GPU count ('scaled from 1x measured': "
        "one GPU measured, the box's GPUs at the all-reduce's share), modelled rows from "
        "the measured GPUs' captured step cost scaled by datasheet compute and memory "
        "bandwidth (an eager step: the longer of the host's launches and that GPU work); "
        f"estimated rows: {a['train_gflop_per_window']:.3f} GFLOP per training window at "
        f"{a['estimated_peak_fraction']:.0%} of the GPU's datasheet peak (bf16, or fp16 on "
        "T4/V100). No row plans above N of its GPU's one-GPU rate or N times its roofline.",
        f"Hours include {a['setup_hours']:g} h of setup (boot, image pull, data sync).",
        f"Storage+egress: dataset plus {a['kept_checkpoints']} checkpoints of "
        f"{a['checkpoint_gb'] * 1000:.0f} MB kept {a['storage_months']:g} month "
        f"({_per_cloud(a['storage_usd_per_gb_month'])} per GB-month), results downloaded once "
        f"({_per_cloud(a['egress_usd_per_gb'])} per GB egress); list prices "
        f"{a['storage_egress_price_date']}.",
        "Regions per size: "
        + "; ".join(f"{cloud}: {label}" for cloud, label in a["offerings"].items())
        + ".",
    ]
    if plan.price_sources:
        lines.append("Price sources: " + "; ".join(plan.price_sources) + ".")
    if plan.unpriced:
        lines.append("No price (hours only, listed last): " + "; ".join(plan.unpriced) + ".")
    if plan.excluded_retired:
        lines.append("Not offered (retired): " + "; ".join(plan.excluded_retired) + ".")
    lines.extend(f"Note: {n}." for n in plan.notes)
    return lines


def print_plan(
    plan: Plan,
    wide: bool = False,
    out: TextIO | None = None,
    terminal_width: int | None = None,
    today: date | None = None,
    explain: bool = False,
) -> None:
    """The table on `out` (stdout), then with `wide` or `explain` the notes: fitted to
    `terminal_width` (a terminal's) when under 100 columns, else 100 columns
    wide; `wide`, every column however wide they are. `today` dates the price
    snapshot's age (default: today, UTC)."""
    out = out or sys.stdout
    if terminal_width is None and out.isatty():
        terminal_width = Console(file=out).width
    fit = min(terminal_width or DEFAULT_COLUMNS, DEFAULT_COLUMNS)
    table = plan_table(plan, fit, wide, explain)
    # A wide table is as wide as it is: a terminal wraps it, `less -S` scrolls it.
    console = Console(file=out, width=max(fit, table_width(table)) if wide else fit)
    today = today or datetime.now(timezone.utc).date()
    if warning := snapshot_age_warning(plan.snapshot_dates, today):
        # "...N months ago:" and "make prices, or --live" each stay whole.
        said, _, fix = f"warning: {warning}".rpartition(": ")
        console.print(lines_of([f"{said}:", fix], fit), highlight=False)
    console.print(table)
    if wide or explain:
        for line in footer_lines(plan):
            console.print(line, highlight=False)
