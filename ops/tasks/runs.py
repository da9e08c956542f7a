"""`fab runs`: every run at a glance, from the stack's storage and the local `runs/`.

Reads storage only (no box): it works with the boxes stopped, and after `pulumi
destroy` from what `fab download` left locally. `--sweep ID` ranks a sweep's trials by
validation MAE, says which was chosen and its one test evaluation, and draws
validation MAE against each swept value.
"""

from __future__ import annotations

import dataclasses
import json as jsonlib
import sys
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from ops.run import listing
from ops.run.names import checked_name
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from stack import storage_layout
from trainer.sweep.spec import RESULT_FILE, TRIALS_FILE

console = Console(stderr=True, soft_wrap=True)
LOCAL_RUNS = "runs"
LOCAL_SWEEPS = "sweeps"
_WIDE_COLUMNS = 200  # when piped, never squeeze the table


def _storage_uri(target: str, stack: str, notes: list[str]) -> str | None:
    try:
        return resolve_target(target or None, stack or None).storage_uri
    except Exit as error:  # no stack any more (`pulumi destroy`): the local runs still count
        notes.append(f"storage not read: {error.message}")
        return None


def _sweep_record(storage_uri: str | None, sweep_id: str, name: str) -> dict | None:
    """A file of the sweep's folder in storage (trainer.sweep.spec), None if unreadable."""
    if storage_uri is None:
        return None
    from trainer.storage import open_store

    try:
        store = open_store(storage_layout.sweep_uri(storage_uri, sweep_id))
        value = jsonlib.loads(store.read_bytes(name))
    except Exception:  # not there yet, or torn: the table stands without it
        return None
    return value if isinstance(value, dict) else None


def _with_trial_states(rows: list, trials: dict | None) -> list:
    """A pruned trial's own status says `stopped`: the sweep's record says why."""
    states = {t.get("run_id"): t.get("state") for t in (trials or {}).get("trials") or []}
    return [
        dataclasses.replace(row, state="pruned") if states.get(row.run_id) == "pruned" else row
        for row in rows
    ]


def _sweep_view(rows: list, sweep_id: str, storage_uri: str | None, plot: str) -> dict:
    from trainer.sweep.plot import plot_val_mae

    trials = _sweep_record(storage_uri, sweep_id, TRIALS_FILE)
    rows = listing.ranked(_with_trial_states(rows, trials))
    keys = listing.differing(rows)
    path = Path(plot or f"{LOCAL_SWEEPS}/{sweep_id}/val_mae.png")
    points = [
        ({listing.short(k): row.settings.get(k) for k in keys}, row.best_val_mae)
        for row in rows
        if row.best_val_mae is not None
    ]
    plot_val_mae(points, path, f"sweep {sweep_id}: validation MAE per trial (test split unused)")
    return {"rows": rows, "keys": keys, "plot": str(path),
            "result": _sweep_record(storage_uri, sweep_id, RESULT_FILE)}  # fmt: skip


def _mae(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def _result_lines(result: dict | None) -> list[str]:
    if not result:
        return ["no trial chosen yet: the test split is untouched until the sweep ends"]
    test = result.get("test") if isinstance(result.get("test"), dict) else {}
    baseline = test.get("baseline") if isinstance(test.get("baseline"), dict) else {}
    return [
        f"chosen: {result.get('chosen')} (lowest validation MAE, {_mae(result.get('val_mae'))}); "
        f"its test MAE {_mae(test.get('mae'))} mg/dL vs baseline {_mae(baseline.get('mae'))}, "
        "evaluated once, for this trial only: trials were compared on the validation split"
    ]


def _cost_line(rows: list) -> str:
    """What the sweep's trials cost: each moment of the box split between the trials
    running then, so the trials add up to what the box billed while they ran."""
    counted = [row.cost_usd for row in rows if row.cost_usd is not None]
    if not counted:
        return "cost:   not counted yet (a trial's dollars are in its summary, once it ends)"
    left = len(rows) - len(counted)
    pending = f"; {left} trial(s) not ended yet, not counted" if left else ""
    return f"cost:   ${sum(counted):.2f} for {len(counted)} trial(s){pending}"


@task(
    help={
        "dataset": "only runs on this dataset",
        "state": "only runs in this state (running, finished, failed, torn, ...)",
        "sweep": "the trials of this sweep, best validation MAE first, and a plot",
        "json": "print JSON instead of a table",
        "local": f"where `fab download` put runs (default: {LOCAL_RUNS}/)",
        "plot": f"with --sweep: the PNG to write (default: {LOCAL_SWEEPS}/<ID>/val_mae.png)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def runs(c, dataset="", state="", sweep="", json=False, local=LOCAL_RUNS, plot="",
         target="", stack=""):  # fmt: skip
    """List every run with its state, settings, validation MAE, time and cost."""
    notes: list[str] = []
    storage_uri = _storage_uri(target, stack, notes)
    found = listing.gather(storage_uri, Path(local))
    notes += found.notes
    sweep_id = checked_name(sweep, "--sweep") if sweep else ""
    rows = listing.select(found.rows, dataset, state, sweep_id)
    view = _sweep_view(rows, sweep_id, storage_uri, plot) if sweep_id else None
    keys = view["keys"] if view else listing.differing(rows)
    rows = view["rows"] if view else rows
    if json:
        out = {"runs": [row.to_json() for row in rows], "differing": keys, "notes": notes}
        if view:
            out.update(sweep=sweep_id, result=view["result"], plot=view["plot"])
            out["cost_usd"] = round(sum(r.cost_usd for r in rows if r.cost_usd is not None), 4)
        print(jsonlib.dumps(out, indent=2))
        return
    for note in notes:
        console.print(f"[yellow]note:[/] {note}")
    if not rows:
        matching = " match" if dataset or state or sweep else ""
        print(f"no runs{matching}; start one: fab train")
        return
    out = Console(width=None if sys.stdout.isatty() else _WIDE_COLUMNS)
    out.print(listing.table(rows, keys, rank=bool(view)))
    if view:
        for line in [*_result_lines(view["result"]), _cost_line(rows)]:
            out.print(line, highlight=False)
        out.print(f"plot: {view['plot']}", highlight=False)
