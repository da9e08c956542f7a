"""`fab status --run SWEEP_ID`: a sweep in a few lines, from its driver's container and
its folder on the box (status.json: its state, its trials counted by state, the best
validation MAE so far), else from storage's mirror of that folder (a box since replaced
or stopped: then no container is known).

A trial is a run (`fab status --run <sweep>-t000`); `fab runs --sweep ID` ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from box import contract
from box.contract import RunRecord, finite_float
from ops.remote.ssh import Box
from ops.run import sweep as on_box_sweep
from ops.run.on_box import ContainerState
from ops.run.status import json_or_empty
from ops.runs.readable import duration
from ops.terminal_text import printable
from stack import storage_layout

# What the driver's exit codes mean (box contract: the sweep driver's container).
DRIVER_EXITS = {
    1: "no trial finished",
    contract.EXIT_USER_ERROR: "a bad spec",
}


@dataclass(frozen=True)
class SweepView:
    """One look at a sweep."""

    sweep_id: str
    state: str
    status: RunRecord
    trials: dict[str, int] = field(default_factory=dict)
    """Trials by state, and `of`: how many the sweep runs."""
    where: str = ""
    """Where its record was read: the box's address, or storage."""

    def lines(self, now: float) -> list[str]:
        """The sweep's lines, each made safe to print."""
        sweep = self.sweep_id
        lines = [f"sweep:      {sweep}", f"state:      {self.state}"]
        if self.trials:
            counts = ", ".join(f"{n} {state}" for state, n in self.trials.items() if state != "of")
            lines.append(f"trials:     {counts or 'none yet'} (of {self.trials.get('of', '?')})")
        if (mae := finite_float(self.status.val_mae)) is not None:
            lines.append(f"best:       validation MAE {mae:.2f} mg/dL (a complete trial)")
        if (updated := finite_float(self.status.updated_at)) is not None:
            lines.append(f"updated:    {duration(max(now - updated, 0))} ago ({self.where})")
        lines += [
            f"ranked:     `fab runs --sweep {sweep}`; one trial: `fab status --run {sweep}-t000`",
            f"log:        `fab logs --run {sweep}` (its driver's)",
        ]
        return [printable(line) for line in lines]

    def to_json(self) -> dict:
        return {
            "sweep_id": self.sweep_id,
            "state": self.state,
            "status": self.status.known(),
            "trials": self.trials,
            "read_from": self.where,
        }


def look(box: Box, sweep_id: str) -> SweepView:
    """Sweep `sweep_id` as its box has it, else as storage's mirror of its folder has it."""
    container = on_box_sweep.inspect(box, sweep_id)
    folder = contract.sweep_dir(box.root, sweep_id)
    text, where = box.read_text(f"{folder}/{contract.STATUS_FILE}"), box.address
    if text is None and container is None:
        text, where = _stored_status(box.target.storage_uri, sweep_id), "storage"
    status, found = RunRecord.parse(text), json_or_empty(text)
    stopped_by_user = box.exists(f"{folder}/{contract.STOPPED_BY_USER}")
    return SweepView(
        sweep_id=sweep_id,
        state=_state(container, status, stopped_by_user, sweep_id),
        status=status,
        trials=_counts(found.get("trials")),
        where=where,
    )


def _state(
    container: ContainerState | None, status: RunRecord, stopped_by_user: bool, sweep_id: str
) -> str:
    """The driver's: running, stopped (by whom), finished, failed (why), or what its
    record last said where no container is known."""
    resume = f"`fab sweep --sweep {sweep_id}` resumes it"
    if container is None:
        said = status.state or "not started"
        return f"{said} (its record; no driver container on this box)"
    if container.running or container.restarting:
        return contract.STATE_RUNNING
    code = container.exit_code
    if code == contract.EXIT_FINISHED:
        return contract.STATE_FINISHED
    if code == contract.EXIT_STOPPED:
        if stopped_by_user:
            return f"stopped by `fab stop` (its trials checkpointed; {resume})"
        return "preempted-waiting (the box's resume unit starts it again)"
    why = DRIVER_EXITS.get(code, "see its log")
    return f"failed (exit {code}: {why}; `fab logs --run {sweep_id}`)"


def _counts(trials: object) -> dict[str, int]:
    """status.json's `trials` (the box's to write): whole counts by state only."""
    if not isinstance(trials, dict):
        return {}
    return {
        str(state): count
        for state, count in trials.items()
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0
    }


def _stored_status(storage_uri: str, sweep_id: str) -> bytes | None:
    from trainer.storage import open_store

    try:
        store = open_store(storage_layout.sweep_uri(storage_uri, sweep_id))
        return store.read_bytes(contract.STATUS_FILE)
    except Exception:  # not mirrored yet, or storage down: a sweep with no record
        return None
