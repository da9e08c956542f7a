"""How a cost plan reads: the table of every size, and the footer of what it assumes."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from ops.plan.estimate import Plan, PlanRow


def _money(usd: float | None) -> str:
    return "—" if usd is None else f"{usd:,.2f}"


def _rate(windows_per_s: float) -> str:
    if windows_per_s >= 1e6:
        return f"{windows_per_s / 1e6:.2f}M"
    return f"{windows_per_s / 1e3:,.0f}k" if windows_per_s >= 1e4 else f"{windows_per_s:,.0f}"


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours >= 10 else f"{hours:.2f}"


# Every column: header, its cell of a row, and whether it is a number (right-aligned).
COLUMNS: tuple[tuple[str, Callable[[PlanRow], str], bool], ...] = (
    ("", lambda row: "✔" if row.pick else "", False),
    ("cloud", lambda row: row.cloud, False),
    ("size", lambda row: row.size, False),
    ("GPU", lambda row: row.gpu, False),
    ("prec", lambda row: row.precision, False),
    ("windows/s", lambda row: _rate(row.windows_per_s), True),
    ("source", lambda row: row.throughput_source, False),
    ("hours", lambda row: _hours(row.hours) + ("" if row.within_deadline else " late"), True),
    ("on-demand $", lambda row: _money(row.on_demand_usd), True),
    ("spot $\n(volatile)", lambda row: _money(row.spot_usd), True),
    ("$ per M\nwindow-passes", lambda row: f"{row.usd_per_million_window_passes:.4f}", True),
    ("storage +\negress $", lambda row: _money(row.storage_egress_usd), True),
    ("total $", lambda row: _money(row.total_usd), True),
)
# What a narrow terminal does without, first to last; the pick, size, GPU, hours and
# the total it is sorted by always stay (`--json` and a piped table have them all).
DROPPED_FIRST = (
    "$ per M\nwindow-passes",
    "source",
    "storage +\negress $",
    "prec",
    "windows/s",
    "cloud",
    "spot $\n(volatile)",
    "on-demand $",
)


# Measures a table's natural width (a console's own width would cap the measurement).
_UNBOUNDED = Console(width=10_000)


def plan_table(plan: Plan, width: int | None = None) -> Table:
    """Every size's row, cheapest first, the pick marked; with every column, or as many
    as fit in `width` terminal columns (cells never wrap: a cut number misleads)."""
    for dropped in range(len(DROPPED_FIRST) + 1):
        table = _table(plan, DROPPED_FIRST[:dropped])
        if width is None or _UNBOUNDED.measure(table).maximum <= width:
            break
    return table


def _table(plan: Plan, left_out: tuple[str, ...]) -> Table:
    r = plan.request
    deadline = f", deadline {r.deadline_hours:g} h" if r.deadline_hours else ""
    sweep = f"a sweep of {r.sweep_trials} trials, each " if r.sweep_trials else ""
    caption = "✔ = cheapest that meets the deadline" if r.deadline_hours else "✔ = cheapest overall"
    if left_out:
        caption += f"; {len(left_out)} columns left out to fit (all: a wider terminal, or --json)"
    table = Table(
        title=(
            f"{sweep}{r.windows:,} windows x {r.epochs} epochs (L={r.window_length}), "
            f"sorted by {plan.price_basis} total{deadline}"
        ),
        caption=caption,
    )
    columns = [column for column in COLUMNS if column[0] not in left_out]
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
        "GPU); measured rows come from ops/plan/measured_throughput.csv, modelled rows from "
        "the measured GPUs' step cost scaled by datasheet compute and memory bandwidth; "
        f"estimated rows: {a['train_gflop_per_window']:.3f} GFLOP per training window at "
        f"{a['estimated_peak_fraction']:.0%} of the GPU's datasheet peak (bf16, or fp16 on "
        "T4/V100).",
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
    if plan.excluded_retired:
        lines.append("Not offered (retired): " + "; ".join(plan.excluded_retired) + ".")
    lines.extend(f"Note: {n}." for n in plan.notes)
    return lines
