"""A sweep's folder, `BOX_ROOT/sweeps/<sweep_id>/` (`/workspace/sweeps/<id>` in the
container), mirrored to `<storageUri>/sweeps/<id>/`:

    sweep.json       the spec `fab sweep` writes (SweepSpec), read by the driver
    optuna.journal   the study (Optuna's journal storage): the queue, each trial's state
                     and values; what a restarted driver resumes from
    status.json      {"state", "step", "updated_at", "exit_code", "trials"}: the box's
                     watchdog and resume unit read it as a run's (step: every trial's
                     steps added up, so it moves while any trial trains)
    trials.json      each trial: number, run id, state, values, validation MAE
    result.json      the chosen trial and its test metrics (the test split's one use)
    report.md, plots/ Optuna's plots of the study (trainer.sweep.plot)
    train.log        the driver's own output (`fab logs --run <sweep_id>` once no
                     container holds it; trainer.checkpoints.run_log)

A trial is a run like any other, `runs/<sweep_id>-tNNN/`, started with `--skip-test`;
its launch.json says `sweep` and `trial`. Torch-free: `fab` imports this.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from box.contract import PLOTS_DIR as PLOTS_DIR  # a sweep's plots are in a folder named as a run's
from box.contract import REPORT_FILE as REPORT_FILE  # a sweep's report is named as a run's
from box.contract import run_uri
from trainer.checkpoints.layout import RUN_LOG_FILE
from trainer.config import UserError

SPEC_FILE = "sweep.json"
JOURNAL_FILE = "optuna.journal"
TRIALS_FILE = "trials.json"
RESULT_FILE = "result.json"
TRIAL_LOG_FILE = RUN_LOG_FILE
"""In a trial's run dir (mirrored with it): the trial's output, which `fab logs` reads
from storage once no container holds the run (a plain run's is the same file)."""
METHODS = ("grid", "random", "tpe")
# A trial's run id is `<sweep_id>-tNNN`: with the box's 64-character names, the sweep
# id keeps 59.
MAX_SWEEP_ID_CHARS = 59
TRIAL_SUFFIX = "-t{number:03d}"
STUDY_FIELDS = ("dataset", "params", "method", "trials", "prune", "seed", "trainer_args")
"""What a sweep searches: two specs that differ here are two studies."""


@dataclass(frozen=True)
class SweepSpec:
    """What to search and how: written once by `fab sweep`, kept by every resume."""

    sweep_id: str
    dataset: str
    data_dir: str
    """The dataset inside the container (the box's read-only cache)."""
    runs_dir: str
    """Where the trials' run dirs go inside the container (the box's runs/)."""
    storage_uri: str
    """The stack's storageUri: trials checkpoint to runs/<id>, the sweep mirrors to sweeps/<id>."""
    params: list[str]
    """`--param` specs (trainer.sweep.space)."""
    method: str = "random"
    trials: int = 8
    concurrent: int = 1
    """Trials at once; on a GPU box they go round the GPUs (more than the GPUs share them)."""
    gpus: int = 0
    prune: bool = False
    """Stop a trial whose validation MAE lags the median of the others at the same epoch."""
    seed: int = 0
    """The sampler's seed (each trial's own --seed is the trainer's, or swept)."""
    trainer_args: list[str] = field(default_factory=list)
    """`train` flags every trial gets (epochs, model, ...)."""
    name: str = ""
    image: str = ""
    hourly_price_usd: float = 0.0
    spot: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"--method {self.method}: expected one of {', '.join(METHODS)}")
        if self.trials < 1:
            raise UserError(f"--trials {self.trials}: must be at least 1")
        if self.concurrent < 1:
            raise UserError(f"--concurrent {self.concurrent}: must be at least 1")
        if len(self.sweep_id) > MAX_SWEEP_ID_CHARS:
            raise UserError(
                f"sweep id {self.sweep_id!r}: at most {MAX_SWEEP_ID_CHARS} characters "
                "(its trials' run ids add -tNNN)"
            )

    def trial_run_id(self, number: int) -> str:
        return self.sweep_id + TRIAL_SUFFIX.format(number=number)

    def trial_checkpoint_uri(self, run_id: str) -> str:
        """Where trial `run_id` checkpoints: its run's folder in the stack's storage."""
        return run_uri(self.storage_uri, run_id)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def same_study(self, other: SweepSpec) -> bool:
        """Whether `other` searches what this does (STUDY_FIELDS): a sweep id names one
        study, whatever box, image or price it runs with."""
        return all(getattr(self, name) == getattr(other, name) for name in STUDY_FIELDS)

    def described(self) -> str:
        """One line naming this sweep's search, for a message about it."""
        return (
            f"sweep {self.sweep_id}{f' ({self.name})' if self.name else ''}: "
            f"{', '.join(self.params)} on {self.dataset}, {self.method}, {self.trials} trials"
        )

    @classmethod
    def from_json(cls, text: str, where: str = SPEC_FILE) -> SweepSpec:
        try:
            data = json.loads(text)
            known = {f.name for f in fields(cls)}
            return cls(**{key: value for key, value in data.items() if key in known})
        except (ValueError, TypeError, AttributeError) as error:
            raise UserError(f"{where}: not a sweep spec ({error})") from None

    @classmethod
    def read(cls, sweep_dir: Path) -> SweepSpec:
        path = Path(sweep_dir) / SPEC_FILE
        try:
            return cls.from_json(path.read_text(), str(path))
        except OSError as error:
            raise UserError(f"{path}: cannot read the sweep's spec ({error})") from None


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file of the sweep, or None when missing or torn."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
