"""`fab plan`: what a training run costs and how long it takes on every GPU size.

The arithmetic lives in `ops.plan`; this module reads the flags, gathers prices and
measurements, and prints a table (or JSON). It needs no box and no cloud account.
"""

from __future__ import annotations

import json as jsonlib
import sys

from invoke import Context, Exit, task
from rich.console import Console
from rich.table import Table

from ops.plan.estimate import (
    MILESTONE_WINDOWS,
    Plan,
    PlanRequest,
    dataset_size,
    make_plan,
    select_sizes,
)
from ops.plan.pricing import live_prices
from ops.plan.throughput import load_measured
from ops.target.resolve import resolve_target
from ops.tasks.image import STACK_HELP, TARGET_HELP
from stack import catalog, storage_layout

_WIDE_COLUMNS = 170  # when piped (make demo > cost_plan.txt), never squeeze the table


def _windows(windows: int, milestone: str | None) -> int:
    if milestone is None:
        if windows <= 0:
            raise Exit(
                "fab plan: no dataset size given; pass --windows N, --milestone M1|M2|M3 "
                "or --dataset NAME"
            )
        return windows
    key = milestone.upper()
    if key not in MILESTONE_WINDOWS:
        raise Exit(f"fab plan: --milestone is {milestone!r}, expected one of M1, M2, M3")
    if windows and windows != MILESTONE_WINDOWS[key]:
        raise Exit(f"fab plan: --windows {windows} contradicts --milestone {key}; pass only one")
    return MILESTONE_WINDOWS[key]


def _dataset(name: str, target: str, stack: str) -> tuple[int, int]:
    """(windows, window length) of dataset `name` in the stack's storage."""
    from trainer.storage import StorageError, open_store

    uri = storage_layout.dataset_uri(
        resolve_target(target or None, stack or None).storage_uri, name
    )
    try:
        meta = jsonlib.loads(open_store(uri).read_bytes("meta.json"))
        return dataset_size(meta)
    except (StorageError, OSError, ValueError) as error:
        raise Exit(
            f"fab plan: --dataset {name}: {uri}/meta.json: {error}; "
            "see `fab upload-data` or `fab prepare-data`"
        ) from None


def _deadline(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise Exit(f"fab plan: --deadline is {text!r}, expected hours such as 12 or 1.5") from None


def _money(usd: float | None) -> str:
    return "—" if usd is None else f"{usd:,.2f}"


def _rate(windows_per_s: float) -> str:
    if windows_per_s >= 1e6:
        return f"{windows_per_s / 1e6:.2f}M"
    return f"{windows_per_s / 1e3:,.0f}k" if windows_per_s >= 1e4 else f"{windows_per_s:,.0f}"


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours >= 10 else f"{hours:.2f}"


def _table(plan: Plan) -> Table:
    r = plan.request
    deadline = f", deadline {r.deadline_hours:g} h" if r.deadline_hours else ""
    table = Table(
        title=(
            f"{r.windows:,} windows x {r.epochs} epochs (L={r.window_length}), "
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


def _footer(plan: Plan) -> list[str]:
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
    ]
    lines.append(
        "Regions per size: "
        + "; ".join(f"{cloud}: {label}" for cloud, label in a["offerings"].items())
        + "."
    )
    if plan.excluded_retired:
        lines.append("Not offered (retired): " + "; ".join(plan.excluded_retired) + ".")
    lines.extend(f"Note: {n}." for n in plan.notes)
    return lines


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


@task(
    help={
        "windows": "dataset size in windows (or use --milestone)",
        "epochs": "passes over the dataset",
        "window-length": "samples per window (default 100)",
        "cloud": "azure, aws or all (default all)",
        "region": "only sizes offered in this region (e.g. eastus, us-east-1)",
        "spot": "cost the run at spot prices (volatile; evictions add time)",
        "deadline": "hours the run may take; the cheapest size within it is marked",
        "json": "print machine-readable JSON instead of a table",
        "live": "fetch current prices (Azure Retail Prices, AWS Price List); snapshot if offline",
        "milestone": "the seeds' dataset sizes: M1 = 0.6M, M2 = 2.4M, M3 = 12M windows",
        "dataset": "a dataset in the stack's storage: its real window count and length",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def plan(
    c: Context,
    windows: int = 0,
    epochs: int = 0,
    window_length: int = 100,
    cloud: str = "all",
    region: str | None = None,
    spot: bool = False,
    deadline: str | None = None,
    json: bool = False,
    live: bool = False,
    milestone: str | None = None,
    dataset: str = "",
    target: str = "",
    stack: str = "",
) -> None:
    """Estimate hours and dollars of a training run on every GPU size."""
    if dataset and (windows or milestone):
        raise Exit("fab plan: --dataset counts the windows itself; drop --windows/--milestone")
    if dataset:
        windows, window_length = _dataset(dataset, target, stack)
    try:
        request = PlanRequest(
            windows=_windows(windows, milestone),
            epochs=epochs,
            window_length=window_length,
            dataset=dataset,
            cloud=cloud,
            region=region,
            spot=spot,
            deadline_hours=_deadline(deadline),
        )
        every_size = catalog.sizes(include_retired=True)
        prices = None
        if live:
            wanted = [s for s in select_sizes(request, every_size) if s.status != "retired"]
            prices = live_prices(wanted, region, warn=_warn)
        result = make_plan(request, every_size, prices, load_measured())
    except ValueError as e:
        raise Exit(f"fab plan: {e}") from None
    if json:
        print(jsonlib.dumps(result.to_json(), indent=2))
        return
    out = Console(width=None if sys.stdout.isatty() else _WIDE_COLUMNS)
    out.print(_table(result))
    for line in _footer(result):
        out.print(line, highlight=False)
