"""Every run's record, read from a store: the stack's storage or the local `runs/`.

A run's folder holds what the trainer mirrors (`summary.json`, `status.json`,
`config.json`, `metrics.jsonl`) and `fab train`'s `launch.json`. Any of them may be
missing (a run that just started), torn (a box killed mid-upload) or hostile (the
bucket is written by the box): each file is read on its own, and what cannot be read
becomes a problem on the run's row, never an exception. Only run ids that pass the
box contract's name rule are listed, so a key cannot smuggle a path into a table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from box import contract
from box.contract import METRICS_FILE, LaunchRecord, RunRecord, RunSummary, finite_float
from ops.runs import upload_pending
from trainer.config import not_settings
from trainer.storage import ObjectNotFound, ObjectStore

SUMMARY, CONFIG, METRICS = contract.SUMMARY_FILE, contract.CONFIG_FILE, METRICS_FILE
LAUNCHED = "launched"
"""A run whose folder holds `fab train`'s launch record alone: started, nothing uploaded
yet (`fab status --run ID` asks its box how it is doing)."""
NOT_SETTINGS = not_settings()
"""config.json's keys that say where a run is or how often it reports, not how it trains."""


@dataclass(frozen=True)
class RunRow:
    """One run as `fab runs` shows it; a value nobody recorded is None."""

    run_id: str
    where: str
    """`storage`, `local` (a `fab download`ed copy), or `storage+local`."""
    state: str
    """status.json's state, `finished` from a summary alone, or `torn`."""
    name: str = ""
    dataset: str | None = None
    sweep: str | None = None
    """The sweep this run is a trial of (its launch.json says so)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """config.json flattened (`optim.lr`), where and how often left out (NOT_SETTINGS)."""
    epochs: int | None = None
    best_val_mae: float | None = None
    wall_s: float | None = None
    cost_usd: float | None = None
    recoveries: int | None = None
    started_at: float | None = None
    problems: tuple[str, ...] = ()
    """Files that are there but could not be read, and keys in them held with a value
    their record cannot read, each with why."""
    missing: tuple[str, ...] | None = None
    """A `finished-upload-pending` run's files storage lacks, as its status.json names
    them (the box's list, contract.UPLOADS_MISSING); None where it names none."""

    def to_json(self) -> dict[str, Any]:
        missing = None if self.missing is None else list(self.missing)
        return {**asdict(self), "problems": list(self.problems), "missing": missing}

    def problem_line(self) -> str | None:
        """What of this run could not be read, in one line (None: all of it was)."""
        return f"run {self.run_id}: {'; '.join(self.problems)}" if self.problems else None

    def notes(self) -> list[str]:
        """The `note:` lines this run gives a listing: what could not be read, and what
        of its uploads storage lacks."""
        return [line for line in (self.problem_line(), self.uploads_line()) if line]

    def uploads_line(self) -> str | None:
        """A run that finished with its last uploads not all in storage: which files
        storage lacks (where the box named them), and what sends them, in one line;
        None for any other run."""
        if self.state != contract.STATE_UPLOAD_PENDING:
            return None
        missing = None if self.missing is None else list(self.missing)
        return f"run {self.run_id} {upload_pending.said(missing, self.run_id, None)}"


def run_ids(store: ObjectStore, prefix: str = "") -> list[str]:
    """The run ids with a folder under `prefix` of the store (`runs/` in storage)."""
    found = set()
    for key in store.list(prefix):
        run_id = key[len(prefix) :].split("/", 1)[0]
        if contract.name_problem(run_id, "run") is None:
            found.add(run_id)
    return sorted(found)


class _Files:
    """One run's folder: each JSON file read once, what went wrong kept."""

    def __init__(self, store: ObjectStore, folder: str) -> None:
        self.store, self.folder, self.problems = store, folder, []

    def text(self, name: str) -> str | None:
        try:
            return self.store.read_bytes(f"{self.folder}{name}").decode()
        except ObjectNotFound:
            return None
        except Exception as error:  # an unreadable object is one run's problem
            self.problems.append(f"{name}: {type(error).__name__}: {error}"[:200])
            return None

    def json(self, name: str) -> dict[str, Any] | None:
        text = self.text(name)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except RecursionError:  # nested past what a parser can follow: hostile, not torn
            self.problems.append(f"{name}: nested too deep to read")
            return None
        except ValueError:
            self.problems.append(f"{name}: not JSON (torn?)")
            return None
        if not isinstance(value, dict):
            self.problems.append(f"{name}: holds {type(value).__name__}, not an object")
            return None
        return value


def read_run(store: ObjectStore, run_id: str, prefix: str = "", where: str = "storage") -> RunRow:
    """The row of run `run_id` from its folder `<prefix><run_id>/` in the store; what
    cannot be read, for whatever reason, is a problem on this row alone."""
    try:
        return _read_run(store, run_id, prefix, where)
    except Exception as error:  # one run's files never hide the others
        problem = f"unreadable: {type(error).__name__}: {error}"[:200]
        return RunRow(run_id=run_id, where=where, state="torn", problems=(problem,))


def _read_run(store: ObjectStore, run_id: str, prefix: str, where: str) -> RunRow:
    files = _Files(store, f"{prefix}{run_id}/")
    summary_dict = files.json(SUMMARY)
    summary = RunSummary.from_dict(summary_dict) if summary_dict is not None else None
    status_dict = files.json(contract.STATUS_FILE)
    status = RunRecord.from_dict(status_dict)
    config = files.json(CONFIG) or {}
    launch_dict = files.json(contract.LAUNCH_FILE)
    launch = LaunchRecord.from_dict(launch_dict)
    unread = _unread((RunSummary, summary_dict), (RunRecord, status_dict),
                     (LaunchRecord, launch_dict))  # fmt: skip
    best = summary.val_mae if summary_dict else _best_val_mae(files)
    train = config.get("train")
    configured_name = train.get("name") if isinstance(train, dict) else None
    return RunRow(
        run_id=run_id,
        where=where,
        state=_state(status, summary, status_dict, files.problems, bool(launch_dict)),
        name=(summary and summary.name) or _str(configured_name) or _str(launch.name) or "",
        dataset=_dataset(launch, config),
        sweep=launch.sweep,
        settings=_flatten(config),
        epochs=summary.epochs if summary_dict else status.epoch,
        best_val_mae=best,
        wall_s=_wall_s(launch, status, summary),
        cost_usd=finite_float(summary.cost_usd) if summary else None,
        recoveries=_recoveries(summary, status),
        started_at=finite_float(launch.started_at) or status.updated_at,
        problems=(*files.problems, *unread),
        missing=_missing(status),
    )


def _missing(status: RunRecord) -> tuple[str, ...] | None:
    """The files a `finished-upload-pending` run's storage lacks, as its record names them."""
    if status.state != contract.STATE_UPLOAD_PENDING:
        return None
    named = status.missing_uploads()
    return None if named is None else tuple(named)


def _state(
    status: RunRecord,
    summary: RunSummary | None,
    status_dict: dict | None,
    problems: list[str],
    launched: bool = False,
) -> str:
    if any(problem.startswith(SUMMARY) for problem in problems):
        return "torn"  # a summary cut mid-upload: its status may say finished already
    if status.state == contract.STATE_FAILED and status.exit_code is not None:
        return f"failed (exit {status.exit_code})"
    if status.state:
        return status.state
    if summary is not None:
        return contract.STATE_FINISHED
    if status_dict is None and launched and not problems:
        return (
            LAUNCHED  # `fab train` stored its launch record; the trainer has uploaded nothing yet
        )
    if status_dict is None and not any(p.startswith(contract.STATUS_FILE) for p in problems):
        problems.append(f"{contract.STATUS_FILE}: missing (no record of the run's progress)")
    return "torn"


def _unread(*records: tuple[type[RunSummary | RunRecord | LaunchRecord], dict | None]) -> list[str]:
    """The keys each record's file held that its record cannot read, the file named."""
    return [
        f"{record.FILE}: {problem}"
        for record, data in records
        if data is not None
        for problem in record.problems(data)
    ]


def _best_val_mae(files: _Files) -> float | None:
    """The best validation MAE of an unfinished run: its epoch records so far."""
    text = files.text(METRICS)
    maes = []
    for line in (text or "").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a torn last line (the trainer drops it too), or a hostile one
        if isinstance(record, dict) and record.get("kind") == "epoch":
            maes.append(finite_float(record.get("val_mae")))
    return min((mae for mae in maes if mae is not None), default=None)


def _wall_s(launch: LaunchRecord, status: RunRecord, summary: RunSummary | None) -> float | None:
    """From the first start to the last record (stops included), else the last
    process's own time (a run started by hand has no launch record)."""
    started = finite_float(launch.started_at)
    if started is not None and status.updated_at is not None:
        return max(status.updated_at - started, 0.0)
    return finite_float(summary.wall_s) if summary else None


def _dataset(launch: LaunchRecord, config: dict) -> str | None:
    if launch.dataset is not None:
        return launch.dataset
    data = config.get("data")
    data_dir = data.get("data_dir") if isinstance(data, dict) else None
    return data_dir.rstrip("/").rsplit("/", 1)[-1] if isinstance(data_dir, str) else None


def _flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{dotted}."))
        elif dotted not in NOT_SETTINGS and isinstance(value, (str, int, float, bool, type(None))):
            # NaN and Infinity as words: `fab runs --json` stays JSON whatever config.json holds
            flat[dotted] = (
                str(value) if isinstance(value, float) and not finite_number(value) else value
            )
    return flat


def finite_number(value: object) -> bool:
    """A JSON number a float holds: not a bool, not infinite or NaN, not an integer of
    hundreds of digits (a hostile file's, which float() refuses)."""
    return finite_float(value) is not None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _recoveries(summary: RunSummary | None, status: RunRecord) -> int | None:
    """The finished run's count, else the count so far."""
    if summary is None or summary.recoveries is None:
        return status.recoveries
    return summary.recoveries
