"""How a cost plan reads: the table of every size, and the footer of what it assumes.

The default table fits 100 columns (a terminal, a file, an issue comment) with what a
choice rests on; `--wide` adds the columns that explain it. A narrower terminal gets
fewer columns and a caption naming them and how to see them, never cut cells.
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
# The default table: the choice (mark, size, GPUs, hours, dollars) and how the speed
# behind the hours was known. The cloud shows in the size's name; the step every row
# assumes, in the title.
DEFAULT = ("", "size", "GPU", "throughput", "hours", "on-demand $", "spot $", "total $")
# What a terminal under 100 columns does without, first to last; the mark, size, GPU,
# hours and the total the rows are sorted by always stay.
DROPPED_FIRST = ("throughput", "spot $", "on-demand $")


# What the default table's caption says `--wide` adds.
WIDE_ONLY = tuple(h.replace("\n", " ") for h, _, _ in COLUMNS if h not in DEFAULT)

# Measures a table's natural width (a console's own width would cap the measurement).
_UNBOUNDED = Console(width=10_000)


def table_width(table: Table) -> int:
    """Columns the table takes with no cell cut or wrapped."""
    return _UNBOUNDED.measure(table).maximum


def plan_table(plan: Plan, width: int | None = DEFAULT_COLUMNS, wide: bool = False) -> Table:
    """Every size's row, cheapest first, the pick marked: every column when `wide`, else
    the default ones, less those a `width` narrower than theirs cannot hold (cells never
    wrap: a cut number misleads)."""
    if wide:
        return _table(plan, [h for h, _, _ in COLUMNS], ())
    for dropped in range(len(DROPPED_FIRST) + 1):
        left_out = DROPPED_FIRST[:dropped]
        table = _table(plan, [h for h in DEFAULT if h not in left_out], left_out)
        if width is None or table_width(table) <= width:
            break
    return table


def _caption(plan: Plan, shown: list[str], left_out: tuple[str, ...]) -> str:
    """What the mark means, and which columns are not shown and how to see them."""
    caption = "✔ = cheapest"
    if plan.request.deadline_hours:
        caption = "✔ = cheapest that meets the deadline; late = misses it"
    if left_out:
        return (
            f"{caption}. Left out to fit: {', '.join(left_out)}; "
            "every column: fab plan --wide (or --json)"
        )
    if len(shown) < len(COLUMNS):
        return f"{caption}. --wide adds: {', '.join(WIDE_ONLY)}"
    return caption


def _table(plan: Plan, headers: list[str], left_out: tuple[str, ...]) -> Table:
    r = plan.request
    deadline = f", deadline {r.deadline_hours:g} h" if r.deadline_hours else ""
    sweep = f"a sweep of {r.sweep_trials} trials, each " if r.sweep_trials else ""
    table = Table(
        title=(
            f"{sweep}{r.windows:,} windows x {r.epochs} epochs (L={r.window_length}), "
            f"{STEP_NAMES[r.step]} step, sorted by {plan.price_basis} total{deadline}"
        ),
        caption=_caption(plan, headers, left_out),
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
        "ops/plan/measured_throughput.csv, modelled rows from the measured GPUs' captured "
        "step cost scaled by datasheet compute and memory bandwidth (an eager step: the "
        "longer of the host's launches and that GPU work); "
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
) -> None:
    """The table and its footer on `out` (stdout): fitted to `terminal_width` when under
    100 columns, else 100 columns wide; `wide`, every column however wide they are.
    `today` dates the price snapshot's age (default: today, UTC)."""
    out = out or sys.stdout
    if terminal_width is None and out.isatty():
        terminal_width = Console(file=out).width
    fit = min(terminal_width or DEFAULT_COLUMNS, DEFAULT_COLUMNS)
    table = plan_table(plan, fit, wide)
    # A wide table is as wide as it is: a terminal wraps it, `less -S` scrolls it.
    console = Console(file=out, width=max(fit, table_width(table)) if wide else fit)
    today = today or datetime.now(timezone.utc).date()
    if warning := snapshot_age_warning(plan.snapshot_dates, today):
        console.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    console.print(table)
    for line in footer_lines(plan):
        console.print(line, highlight=False)
