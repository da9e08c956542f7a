"""`fab runs`: every run of the stack's storage and of the local `runs/`, in one table.

Storage is read whether the boxes are up or not; the local folder is what `fab
download` wrote, all that is left after `pulumi destroy`. A run in both is one row:
the copy with fewer unreadable files, storage on a tie (it is the newer). The
settings column shows only what differs between the rows shown, so a sweep's table
reads as its swept values. The table fits the terminal by giving way column by column
(`ops.runs.table_fit`): shorter headers, briefer cells, fewer settings, then the least
needed columns left out, never a word cut short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from box.contract import STATE_UPLOAD_PENDING
from ops.runs import readable
from ops.runs.records import RunRow, read_run, run_ids
from ops.runs.table_fit import ALWAYS, Cell, Column, fit
from ops.terminal_text import printable
from stack import storage_layout

RUNS_PREFIX = f"{storage_layout.RUNS_PREFIX}/"
LOCAL_RUNS = "runs"
DEMO_RUNS = "demo/runs"  # the Makefile's DEMO_RUN is a run in it
POINT_IT = (
    "point --local DIR at a folder of runs, or --target local at this machine's; "
    "or start one: fab train"
)


@dataclass
class Listing:
    rows: list[RunRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What could not be read as a whole (storage down, no stack), one line each."""


def _read_all(uri: str, prefix: str, where: str) -> list[RunRow]:
    from trainer.storage import open_store

    store = open_store(uri)
    return [read_run(store, run_id, prefix, where) for run_id in run_ids(store, prefix)]


def local_dirs(local: str) -> list[Path]:
    """`--local DIR`, else where `fab download` (`runs/`) and `make demo` (`demo/runs/`)
    put runs."""
    return [Path(local)] if local else [Path(LOCAL_RUNS), Path(DEMO_RUNS)]


def sources(storage_uri: str | None, local: list[Path]) -> list[tuple[str, str, str]]:
    """(store URI, the runs' prefix in it, what to call it) of each place runs are read
    from: storage first, then each local folder that exists."""
    found = [(f"file://{d.resolve()}", "", "local") for d in local if d.is_dir()]
    return [(storage_uri, RUNS_PREFIX, "storage"), *found] if storage_uri else found


def looked_in(storage_uri: str | None, local: list[Path]) -> str:
    """Where runs were looked for, for a line that says none were found."""
    places = [f"{d}/" for d in local]
    return " and ".join(([storage_uri] if storage_uri else []) + [", ".join(places)])


def gather(storage_uri: str | None, local: list[Path]) -> Listing:
    """Rows from storage (when a stack or target names one) and from the `local`
    folders, newest first."""
    listing, found = Listing(), {}
    for uri, prefix, where in sources(storage_uri, local):
        try:
            rows = _read_all(uri, prefix, where)
        except Exception as error:  # one source down must not hide the other
            listing.notes.append(f"{where} not read ({uri}): {type(error).__name__}: {error}")
            continue
        for row in rows:
            found[row.run_id] = _merged(found.get(row.run_id), row)
    listing.rows = sorted(found.values(), key=lambda r: (r.started_at or 0, r.run_id), reverse=True)
    return listing


def find(storage_uri: str | None, local: list[Path], run_id: str) -> tuple[RunRow, str] | None:
    """Run `run_id`'s row from the first place that holds its folder, with the folder;
    None where none does (or none answers)."""
    from trainer.storage import open_store

    for uri, prefix, where in sources(storage_uri, local):
        try:
            store = open_store(uri)
            if store.list(f"{prefix}{run_id}/"):
                return read_run(
                    store, run_id, prefix, where
                ), f"{uri.rstrip('/')}/{prefix}{run_id}/"
        except Exception:  # a source down: the next may hold it
            continue
    return None


def _merged(kept: RunRow | None, other: RunRow) -> RunRow:
    if kept is None:
        return other
    better = other if len(other.problems) < len(kept.problems) else kept
    return replace(better, where="storage+local")


def select(
    rows: Iterable[RunRow], dataset: str = "", state: str = "", sweep: str = ""
) -> list[RunRow]:
    """The rows that match every filter given (`state` matches its start: `failed`)."""
    return [
        row
        for row in rows
        if (not dataset or row.dataset == dataset)
        and (not state or row.state.startswith(state))
        and (not sweep or row.sweep == sweep)
    ]


def ranked(rows: Iterable[RunRow]) -> list[RunRow]:
    """Best validation MAE first; runs without one last (they may still be training)."""
    return sorted(rows, key=lambda r: (r.best_val_mae is None, r.best_val_mae or 0.0, r.run_id))


def differing(rows: list[RunRow]) -> list[str]:
    """The settings whose values are not the same in every row that has a config, the
    most varied first (a sweep's swept ones): a narrow table keeps the first."""
    configured = [row.settings for row in rows if row.settings]
    keys = sorted({key for settings in configured for key in settings})
    values = {key: len({repr(s.get(key)) for s in configured}) for key in keys}
    return sorted((key for key in keys if values[key] > 1), key=lambda key: -values[key])


def short(key: str) -> str:
    """`optim.weight_decay` -> `weight_decay`: the names are unique without the section."""
    return key.rsplit(".", 1)[-1]


def _value(value: Any) -> str:
    """A setting as the table shows it: None (the trainer's own default) as `-`, as
    every cell nobody recorded."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _wall(seconds: float | None) -> str:
    """As `fab status` says a duration (`13 min`, `1 h 05 min`), which --hours reads too."""
    return "-" if seconds is None else readable.duration(seconds)


def _state(row: RunRow) -> Cell:
    """A torn run's state names what is broken, a finished run's whose last uploads did
    not all land how many files storage lacks; in brief (a narrow terminal) the state
    alone, the files or the problem in its note above the table."""
    if row.state == "torn" and row.problems:
        return Cell(f"{row.state}: {row.problems[0]}", row.state)
    if row.state == STATE_UPLOAD_PENDING:
        lacks = "some files" if row.missing is None else f"{len(row.missing)} files"
        return Cell(f"{row.state}: {lacks} not in storage", row.state)
    return Cell(row.state)


def _name(row: RunRow) -> str:
    """The run's name, where it says more than its id: a sweep's trial is named by the
    sweep (its name, or its id) and its number, which a trial's id already reads."""
    if row.sweep and row.name.replace(" ", "-") == row.run_id:
        return "-"
    return row.name or "-"


RUN_COLUMNS = {
    "#": Column("#", keep=ALWAYS, justify="right"),
    "run": Column("run", keep=ALWAYS),
    "name": Column("name", keep=6),
    "state": Column("state", keep=ALWAYS),
    "dataset": Column("dataset", keep=3),
    "settings": Column("settings", keep=7, words=True),
    "epochs": Column("epochs", keep=2, justify="right"),
    "best val MAE": Column("best val MAE", short="val MAE", keep=9, justify="right"),
    "wall": Column("wall", keep=4, justify="right"),
    "$": Column("$", keep=5, justify="right"),
    "recoveries": Column("recoveries", keep=1, justify="right"),
}
"""`fab runs`' columns, each with what it gives way with on a narrow terminal."""


def table(
    rows: list[RunRow], keys: list[str], width: int, *, rank: bool = False
) -> tuple[Table, list[str]]:
    """One line per run, in `width` columns: with `rank`, a sweep's trials best first
    and one column per swept setting; else newest first with the differing settings in
    one column. And a line for each run left out of it, its values beyond showing, and
    one naming the columns the width left out."""
    swept = [Column(short(k), keep=8) for k in keys] if rank else [RUN_COLUMNS["settings"]]
    columns = [RUN_COLUMNS["#"]] * rank + [RUN_COLUMNS[n] for n in ("run", "name", "state")]
    columns += [RUN_COLUMNS["dataset"], *swept]
    columns += [RUN_COLUMNS[n] for n in ("epochs", "best val MAE", "wall", "$", "recoveries")]
    shown, left_out = [], []
    for place, row in enumerate(rows, start=1):
        try:
            shown.append([_safe(c) for c in [Cell(str(place))] * rank + _cells(row, keys, rank)])
        except Exception as error:  # the bucket's values: one run never hides the rest
            left_out.append(f"run {row.run_id} left out: {type(error).__name__}: {error}")
    at = columns.index(RUN_COLUMNS["name"])
    if all(cells[at].text == "-" for cells in shown):  # no names, or trials': ids say it
        columns, shown = columns[:at] + columns[at + 1 :], [c[:at] + c[at + 1 :] for c in shown]
    fitted = fit(columns, shown, width)
    grid = Table(show_edge=False, pad_edge=False)
    for column, header in zip(fitted.columns, fitted.headers, strict=True):
        grid.add_column(header, no_wrap=True, justify=column.justify)
    for cells in fitted.rows:
        grid.add_row(*(Text(text) for text in cells))
    if fitted.left_out:
        left_out.append(
            f"{width} columns: {', '.join(fitted.left_out)} left out (a wider terminal, or "
            "--json, shows every column)"
        )
    return grid, left_out


def _safe(value: Cell) -> Cell:
    """Both forms of a cell made safe to print (`printable`): the bucket's text."""
    brief = None if value.brief is None else printable(value.brief)
    return Cell(printable(value.text), brief)


def _cells(row: RunRow, keys: list[str], rank: bool) -> list[Cell]:
    """A row's cells: the names, states and settings are what the bucket holds."""
    values = [_value(row.settings.get(k, "-")) for k in keys]
    pairs = zip(keys, values, strict=True)
    settings = values if rank else [" ".join(f"{short(k)}={v}" for k, v in pairs)]
    texts = [
        row.run_id, _name(row), _state(row), row.dataset or "-", *settings,
        _number(row.epochs, "d"), _number(row.best_val_mae, ".2f"), _wall(row.wall_s),
        _number(row.cost_usd, ".2f"), _number(row.recoveries, "d"),
    ]  # fmt: skip
    return [text if isinstance(text, Cell) else Cell(text) for text in texts]
