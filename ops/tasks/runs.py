"""`fab runs`: every run at a glance, from the stack's storage and the local `runs/`.

Reads storage only (no box): it works with the boxes stopped, and after `pulumi
destroy` from what `fab download` left locally. `--sweep ID` ranks a sweep's trials by
validation MAE, says which was chosen and its one test evaluation, and draws Optuna's
plots of its study from the sweep's journal in storage.
"""

from __future__ import annotations

import dataclasses
import json as jsonlib
import sys
import tempfile
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from box.contract import STATE_UPLOAD_PENDING, TRIAL_PRUNED, finite_float
from ops.run.names import checked_name
from ops.runs import listing
from ops.runs.filters import RUN_STATES, check_filters
from ops.runs.readable import money
from ops.target.resolve import resolve_target
from ops.tasks.flags import STACK_HELP, TARGET_HELP, task
from ops.terminal_text import markup_safe, printable, say_note
from stack import storage_layout
from trainer.sweep.spec import JOURNAL_FILE, PLOTS_DIR, RESULT_FILE, TRIALS_FILE

console = Console(stderr=True, soft_wrap=True)
LOCAL_SWEEPS = "sweeps"
_WIDE_COLUMNS = 200  # when piped, never squeeze the table


def storage_uri_or_note(target: str, stack: str, notes: list[str]) -> str | None:
    """The stack's storage, or None with a note saying why it is not read."""
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


def _trial_list(trials: dict | None) -> list[dict]:
    """trials.json's trials (the sweep's folder is the box's to write: only objects)."""
    listed = (trials or {}).get("trials")
    return [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []


def _with_trial_states(rows: list, trials: dict | None) -> list:
    """A pruned trial's own status says `stopped`: the sweep's record says why."""
    states = {t.get("run_id"): t.get("state") for t in _trial_list(trials)}
    return [
        dataclasses.replace(row, state=TRIAL_PRUNED)
        if states.get(row.run_id) == TRIAL_PRUNED
        else row
        for row in rows
    ]


def _sweep_view(rows: list, sweep_id: str, storage_uri: str | None, plot: str) -> dict:
    trials = _sweep_record(storage_uri, sweep_id, TRIALS_FILE)
    rows = listing.ranked(_with_trial_states(rows, trials))
    folder = Path(plot or f"{LOCAL_SWEEPS}/{sweep_id}/{PLOTS_DIR}")
    missing = _sweep_plots(storage_uri, sweep_id, folder)
    return {"rows": rows, "keys": listing.differing(rows), "sweep_id": sweep_id,
            "plot": None if missing else str(folder), "plot_missing": missing,
            "result": _sweep_record(storage_uri, sweep_id, RESULT_FILE),
            "trials": _trial_list(trials)}  # fmt: skip


def _waiting_sweep(view: dict) -> str:
    """A sweep whose trials have stored no record yet: what its own record says."""
    counts: dict[str, int] = {}
    for trial in view["trials"]:
        state = str(trial.get("state"))
        counts[state] = counts.get(state, 0) + 1
    said = ", ".join(f"{count} trial{'s' * (count > 1)} {state}" for state, count in counts.items())
    return (
        f"sweep {view['sweep_id']}: {said}, none has uploaded a record yet (each does within "
        "a minute of its start); `fab runs --sweep` again shortly"
    )


def _sweep_plots(storage_uri: str | None, sweep_id: str, folder: Path) -> str | None:
    """Draw Optuna's plots of the sweep's study into `folder`, from its journal in
    storage; None when drawn, else why not."""
    if storage_uri is None:
        return "no storage to read the sweep's journal from"
    from trainer.storage import ObjectNotFound, open_store
    from trainer.sweep.plot import load_study, plot_study

    with tempfile.TemporaryDirectory() as scratch:
        journal = Path(scratch) / JOURNAL_FILE
        try:
            open_store(storage_layout.sweep_uri(storage_uri, sweep_id)).get_file(
                JOURNAL_FILE, journal
            )
        except ObjectNotFound:
            return f"sweep {sweep_id} has no {JOURNAL_FILE} in storage yet"
        plot_study(load_study(journal, sweep_id), folder, f"sweep {sweep_id}")
    return None


def _mae(value: object) -> str:
    number = finite_float(value)
    return "-" if number is None else f"{number:.2f}"


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
    """What the sweep's trials cost: each moment of the box split between the runs (the
    trials among them) running then, so the trials add up to what the box billed while
    they ran."""
    counted = [row.cost_usd for row in rows if row.cost_usd is not None]
    if not counted:
        return "cost:   not counted yet (a trial's dollars are in its summary, once it ends)"
    left = len(rows) - len(counted)
    pending = f"; {left} trial(s) not ended yet, not counted" if left else ""
    return f"cost:   {money(sum(counted))} for {len(counted)} trial(s){pending}"


@task(
    help={
        "dataset": "only runs on this dataset",
        "state": f"only runs in this state: {', '.join(RUN_STATES)}; a state matches "
        f"its start (`finished` lists {STATE_UPLOAD_PENDING} too, `failed` every exit)",
        "sweep": "the trials of this sweep, best validation MAE first, and a plot",
        "json": "print JSON instead of a table",
        "local": f"a folder of runs (default: {listing.LOCAL_RUNS}/, where `fab download` puts "
        f"them, and {listing.DEMO_RUNS}/, `make demo`'s)",
        "plot": "with --sweep: the folder for its plots (default: "
        f"{LOCAL_SWEEPS}/<ID>/{PLOTS_DIR}/)",
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    }
)
def runs(c, dataset="", state="", sweep="", json=False, local="", plot="",
         target="", stack=""):  # fmt: skip
    """List every run with its state, settings, validation MAE, time and cost."""
    notes: list[str] = []
    storage_uri = storage_uri_or_note(target, stack, notes)
    local_dirs = listing.local_dirs(local)
    found = listing.gather(storage_uri, local_dirs)
    notes += found.notes
    sweep_id = checked_name(sweep, "--sweep") if sweep else ""
    check_filters(found.rows, storage_uri, dataset, state, sweep_id)
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
        say_note(console, note)
    if not found.rows:
        print(f"no runs in {listing.looked_in(storage_uri, local_dirs)}; {listing.POINT_IT}")
        return
    if not rows:
        print(printable(_waiting_sweep(view)) if view and view["trials"] else
              f"none of the {len(found.rows)} runs matches; `fab runs` lists them all")  # fmt: skip
        return
    out = Console(width=None if sys.stdout.isatty() else _WIDE_COLUMNS)
    grid, left_out = listing.table(rows, keys, out.width, rank=bool(view))
    said = [line for row in rows for line in row.notes()]
    for line in [*said, *left_out]:
        say_note(console, line)
    out.print(grid)
    if view:
        for line in [*_result_lines(view["result"]), _cost_line(rows)]:
            out.print(markup_safe(line), highlight=False)
        drawn = f"{view['plot']}/ (Optuna's history, parallel coordinates, MAE per epoch)"
        out.print(f"plots: {view['plot_missing'] or drawn}", highlight=False)
