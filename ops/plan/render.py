"""How a cost plan reads: the table of every size, and the footer of what it assumes."""

from __future__ import annotations

from rich.table import Table

from ops.plan.estimate import Plan


def _money(usd: float | None) -> str:
    return "—" if usd is None else f"{usd:,.2f}"


def _rate(windows_per_s: float) -> str:
    if windows_per_s >= 1e6:
        return f"{windows_per_s / 1e6:.2f}M"
    return f"{windows_per_s / 1e3:,.0f}k" if windows_per_s >= 1e4 else f"{windows_per_s:,.0f}"


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours >= 10 else f"{hours:.2f}"


def plan_table(plan: Plan) -> Table:
    """Every size's row, cheapest first, the pick marked."""
    r = plan.request
    deadline = f", deadline {r.deadline_hours:g} h" if r.deadline_hours else ""
    sweep = f"a sweep of {r.sweep_trials} trials, each " if r.sweep_trials else ""
    table = Table(
        title=(
            f"{sweep}{r.windows:,} windows x {r.epochs} epochs (L={r.window_length}), "
            f"sorted by {plan.price_basis} total{deadline}"
        ),
        caption="✔ = cheapest that meets the deadline"
        if r.deadline_hours
        else "✔ = cheapest overall",
    )
    for name in (
        "",
        "cloud",
        "size",
        "GPU",
        "prec",
        "windows/s",
        "source",
        "hours",
        "on-demand $",
        "spot $\n(volatile)",
        "$ per M\nwindow-passes",
        "storage +\negress $",
        "total $",
    ):
        numeric = "$" in name or name in ("windows/s", "hours")
        table.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=name == "size",
            min_width=max(len(line) for line in name.split("\n")),
        )
    for row in plan.rows:
        table.add_row(
            "✔" if row.pick else "",
            row.cloud,
            row.size,
            row.gpu,
            row.precision,
            _rate(row.windows_per_s),
            row.throughput_source,
            _hours(row.hours) + ("" if row.within_deadline else " late"),
            _money(row.on_demand_usd),
            _money(row.spot_usd),
            f"{row.usd_per_million_window_passes:.4f}",
            _money(row.storage_egress_usd),
            _money(row.total_usd),
        )
    return table


def _per_cloud(prices: dict[str, float]) -> str:
    return ", ".join(f"{cloud} ${usd:g}" for cloud, usd in prices.items())


def footer_lines(plan: Plan) -> list[str]:
    """What the figures assume, and where prices and throughput came from."""
    a = plan.assumptions
    sources = sorted({f"{r.cloud}: {r.price_source} ({r.price_region})" for r in plan.rows})
    lines = [
        "Prices: " + "; ".join(sources) + ". Spot prices move hourly.",
        f"Estimated rows: {a['train_gflop_per_window']:.3f} GFLOP per training window at "
        f"{a['estimated_peak_fraction']:.0%} of the GPU's datasheet peak (bf16, or fp16 on "
        "T4/V100); measured rows come from ops/plan/measured_throughput.csv.",
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
