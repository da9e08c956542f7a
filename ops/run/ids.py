"""What an id given to `--run` names: a run, a sweep's trial (a run that trains inside
its sweep's container), or a sweep. `fab status`, `fab logs` and `fab stop` take any of
the three by `--run ID`, as `fab runs` lists them.

A run's container or run dir on the box makes the id a run's (its launch.json says
whether it is a trial, and of which sweep); else a sweep's container or folder on the
box, or its spec in storage (a box since replaced), makes it a sweep's. An id neither
names stays a run's: each command says a run of that id is not there.
"""

from __future__ import annotations

from dataclasses import dataclass

from box import contract
from box.contract import LaunchRecord
from ops.remote.ssh import Box
from ops.run import on_box
from ops.run import sweep as on_box_sweep
from stack import storage_layout


@dataclass(frozen=True)
class Named:
    """What `--run ID` names."""

    id: str
    is_sweep: bool = False
    trial_of: str | None = None
    """The sweep whose trial this run is."""
    trial: int | None = None

    @property
    def sweep_id(self) -> str | None:
        """The sweep this id is, or whose trial it is; None for a plain run."""
        return self.id if self.is_sweep else self.trial_of

    def trial_line(self) -> str:
        """Of a trial: what holds it (no container of its own)."""
        which = f"trial {self.trial}" if self.trial is not None else "a trial"
        return (
            f"run {self.id} is {which} of sweep {self.trial_of}, which trains it inside "
            "the sweep's own container"
        )


def named(box: Box, name: str) -> Named:
    """What `name` (a checked id) names on `box`, or in storage."""
    run_dir = contract.run_dir(box.root, name)
    if on_box.inspect_container(box, name) is not None or box.exists(run_dir):
        record = LaunchRecord.parse(box.read_text(f"{run_dir}/{contract.LAUNCH_FILE}"))
        sweep = record.sweep
        if isinstance(sweep, str) and contract.name_problem(sweep, "sweep") is None:
            return Named(name, trial_of=sweep, trial=record.trial)
        return Named(name)
    if on_box_sweep.inspect(box, name) is not None or box.exists(
        contract.sweep_dir(box.root, name)
    ):
        return Named(name, is_sweep=True)
    return Named(name, is_sweep=stored_sweep(box.target.storage_uri, name))


def stored_sweep(storage_uri: str, name: str) -> bool:
    """Storage holds a sweep of this id (its spec)."""
    from trainer.storage import open_store
    from trainer.sweep.spec import SPEC_FILE

    try:
        return bool(open_store(storage_layout.sweep_uri(storage_uri, name)).list(SPEC_FILE))
    except Exception:  # storage down: the id stays a run's, whose message says where it looked
        return False
