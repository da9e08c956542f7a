"""`fab plan`: what a training run costs and how long it takes on every GPU size.

The arithmetic lives in `ops.plan.estimate`, the table in `ops.plan.render`; this
module reads the flags, gathers prices and measurements, and prints (or JSON). It
needs no box and no cloud account.
"""

from __future__ import annotations

import json as jsonlib
import sys

from invoke import Context, Exit

from ops.plan.estimate import (
    MILESTONE_WINDOWS,
    PlanRequest,
    make_plan,
    select_sizes,
    stored_dataset_size,
)
from ops.plan.pricing import live_prices
from ops.plan.render import print_plan
from ops.plan.throughput import load_measured
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from stack import catalog, storage_layout
from trainer.config import DEFAULT_EPOCHS


def _windows(windows: int | None, milestone: str | None) -> int:
    if milestone is None:
        if windows is None:
            raise Exit(
                "fab plan: no dataset size given; pass --windows N, --milestone M1|M2|M3 "
                "or --dataset NAME"
            )
        return windows  # PlanRequest says what is wrong with 0 or -5
    key = milestone.upper()
    if key not in MILESTONE_WINDOWS:
        raise Exit(f"fab plan: --milestone is {milestone!r}, expected one of M1, M2, M3")
    if windows is not None and windows != MILESTONE_WINDOWS[key]:
        raise Exit(f"fab plan: --windows {windows} contradicts --milestone {key}; pass only one")
    return MILESTONE_WINDOWS[key]


def _dataset(name: str, target: str, stack: str) -> tuple[int, int]:
    """(windows, window length) of dataset `name` in the stack's storage."""
    from trainer.storage import StorageError

    uri = storage_layout.dataset_uri(
        resolve_target(target or None, stack or None).storage_uri, name
    )
    try:
        return stored_dataset_size(uri)
    except (StorageError, OSError, ValueError) as error:
        raise Exit(
            f"fab plan: --dataset {name}: {uri}/meta.json: {error}; "
            "see `fab upload-data` or `fab prepare-data`"
        ) from None


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


@task(
    durations={"deadline": "h"},
    help={
        "windows": "dataset size in windows, e.g. 600k (or use --milestone)",
        "epochs": f"passes over the dataset (default: the trainer's, {DEFAULT_EPOCHS})",
        "window-length": "samples per window (default 100)",
        "cloud": "azure, aws or all (default all)",
        "region": "only sizes offered in this region (e.g. eastus, us-east-1)",
        "spot": "cost the run at spot prices (volatile; evictions add time)",
        "deadline": "how long the run may take; the cheapest size within it is marked",
        "json": "print machine-readable JSON instead of a table",
        "live": "fetch current prices (Azure Retail Prices, AWS Price List); snapshot if offline",
        "milestone": "the seeds' dataset sizes: M1 = 0.6M, M2 = 2.4M, M3 = 12M windows",
        "dataset": "a dataset in the stack's storage: its real window count and length",
        "sweep": "price a sweep of N trials instead (each a run of --epochs on one GPU, as many "
        "at once as the size has GPUs)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
        "wide": "every column (cloud, precision, windows/s, ...; wider than 100 columns) and "
        "the notes",
        "explain": "the notes under the table: where prices and throughput come from, what the "
        "hours and the storage assume",
        "graph": "the captured step, the trainer's default (--no-graph: the eager step, "
        "what `train --no-graph` or a failed capture runs)",
    },
)
def plan(
    c: Context,
    windows: int | None = None,
    epochs: int = DEFAULT_EPOCHS,
    window_length: int = 100,
    cloud: str = "all",
    region: str | None = None,
    spot: bool = False,
    deadline: float | None = None,
    json: bool = False,
    live: bool = False,
    milestone: str | None = None,
    dataset: str = "",
    sweep: int = 0,
    target: str = "",
    stack: str = "",
    wide: bool = False,
    graph: bool = True,
    explain: bool = False,
) -> None:
    """Estimate hours and dollars of a training run (or a sweep) on every GPU size."""
    if dataset and (windows is not None or milestone):
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
            deadline_hours=deadline,
            sweep_trials=int(sweep),
            graph=graph,
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
    print_plan(result, wide, explain=explain)
