"""`fab runs`' filters checked against what could match: a state the trainer writes, a
dataset or sweep that storage or a listed run names. A value nothing could match is a
typo or the wrong stack, so it is one line and a non-zero exit, never "no runs match"."""

from __future__ import annotations

from invoke.exceptions import Exit

from box.contract import STATES, TRIAL_PRUNED
from ops.runs.records import LAUNCHED, RunRow
from stack import storage_layout

ROW_ONLY_STATES = ("torn", TRIAL_PRUNED, LAUNCHED)
"""What `fab runs` itself calls a run: files it cannot read, a trial its sweep pruned, a
run with its launch record alone."""
RUN_STATES = (*STATES, *ROW_ONLY_STATES)
"""What `--state` may name (a start of one: `fail`)."""


def check_filters(
    rows: list[RunRow], storage_uri: str | None, dataset: str = "", state: str = "",
    sweep: str = "",
) -> None:  # fmt: skip
    """Exit naming the first filter no run could ever match, and what it could be."""
    if state and not any(known.startswith(state) for known in RUN_STATES):
        raise Exit(f"--state {state!r} is no run state; use one of: {', '.join(RUN_STATES)}")
    for flag, value, prefix, of_row in (
        ("--dataset", dataset, storage_layout.DATASETS_PREFIX, lambda row: row.dataset),
        ("--sweep", sweep, storage_layout.SWEEPS_PREFIX, lambda row: row.sweep),
    ):
        if not value:
            continue
        known = {of_row(row) for row in rows} | _stored_names(storage_uri, prefix)
        known.discard(None)
        if value not in known:
            named = ", ".join(sorted(known)) or "none"
            raise Exit(f"{flag} {value!r} names nothing in storage or the local runs; "
                       f"there are: {named}")  # fmt: skip


def _stored_names(storage_uri: str | None, prefix: str) -> set[str]:
    """The folder names under `prefix/` of the stack's storage (none without one)."""
    if storage_uri is None:
        return set()
    from trainer.storage import open_store

    try:
        keys = open_store(storage_uri).list(f"{prefix}/")
    except Exception:  # storage down: `fab runs` has said so; the rows still count
        return set()
    return {key[len(prefix) + 1 :].split("/", 1)[0] for key in keys}
