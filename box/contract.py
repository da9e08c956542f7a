"""The box's contract: every name the box programs, `fab` and the trainer agree on.

One definition each: the box programs, the trainer (the image ships this file as
`box/contract.py`, the one module of `box` it holds), `ops/`, `stack/`, `pulumi/` and
the packer import it as `box.contract`. What a run dir holds is here: its files'
names, status.json's states and keys (`RunRecord`), launch.json's (`LaunchRecord`),
summary.json's (`RunSummary`), where a run lives in storage (`run_uri`), and the exit
codes of `python -m trainer`.

Standard library only, Python 3.10+ (MIN_PYTHON, from the package's `__init__`), and no
import of ours but the package's own `__init__`, which the image ships beside it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar, get_args, get_origin, get_type_hints

from box import MIN_PYTHON  # noqa: F401 (contract.MIN_PYTHON, as the trees read it)

# Where a box keeps things.
BOX_ROOT = "/var/lib/glucose-training"
"""Runs, datasets, leases and the watchdog's records (a target file's `boxRoot` moves it)."""
PROGRAM_DIR = "/opt/glucose-training"
"""The box programs: PROGRAM_DIR/releases/<build> each, the one in use linked as CURRENT."""
CURRENT = "current"
"""PROGRAM_DIR/current: the set of programs the units run (install.py switches it)."""
UNIT_DIR = "/etc/systemd/system"
SETTINGS_DIR = "/etc/glucose-training"
WATCHDOG_CONFIG_PATH = f"{SETTINGS_DIR}/watchdog.json"
VERSION_PATH = f"{SETTINGS_DIR}/box-version.json"
"""Which programs and settings a box runs: `{"programs": sha256, "settings": sha256}`."""
RUN_STATE_DIR = "/run/glucose-training"
"""tmpfs: a full root disk cannot stop the countdown kept here, and a boot resets it."""

# Under the box root.
READY_MARKER = "ready"
"""Written last by the first boot's setup: `fab` waits for it."""
FAILED_MARKER = "failed"
"""Written instead of `ready` when setup failed: when and how, then the log's tail."""
SETUP_LOG = "setup.log"
RUNS_DIR = "runs"
DATASETS_DIR = "datasets"
LEASES_DIR = "leases"
SWEEPS_DIR = "sweeps"
"""`fab sweep`'s sweeps, one folder each (the trainer's `trainer.sweep.spec` says what
is in it; its status.json has a run's keys: state, step, updated_at, exit_code)."""
WATCHDOG_DIR = "watchdog"
STOPS_FILE = "stops.jsonl"
"""Under WATCHDOG_DIR: why the box stopped, one JSON object per stop (`at`, `boot_id`...)."""
BOOTS_FILE = "boots.jsonl"
"""Under WATCHDOG_DIR: when the box came up, `{"at", "boot_id"}` per boot."""
RECORD_AT, RECORD_BOOT_ID = "at", "boot_id"
"""Keys of every record in BOOTS_FILE and STOPS_FILE: when (unix s), in which boot."""
RECORD_SIZE, RECORD_ZONE, RECORD_MARKET = "size", "zone", "market"
"""Keys of a BOOTS_FILE record too, from the instance metadata: the size, zone and market
(`spot`, `on-demand`) the box booted on: what each boot is priced at."""
STOP_BY, STOP_SUMMARY = "by", "summary"
"""Keys of a stop record too: who stopped the box (`idle-watchdog`, `spot`...), and one
line that says so (`fab status` shows it)."""
STOP_SHUTDOWN = "shutdown"
"""Key of the copy of a watchdog's stop record written as the box went down: the end of
its bill, where the cloud refused the watchdog's first stop requests."""
USER_DIRS = (RUNS_DIR, DATASETS_DIR, LEASES_DIR, SWEEPS_DIR)
"""Owned by the SSH user: `fab` writes them without root."""

# In a run dir (BOX_ROOT/runs/<run_id>; the same names under its folder in storage).
STATUS_FILE = "status.json"
"""Rank 0's record of the run (RunRecord; trainer.reports.status writes it)."""
HEARTBEAT_FILE = "heartbeat.json"
"""`{"step", "updated_at"}` of a box whose ranks write no status.json."""
METRICS_FILE = "metrics.jsonl"
"""The run's records, one JSON object a line (trainer.reports.progress writes them)."""
CONFIG_FILE = "config.json"
"""The run's resolved settings, written at its start (trainer.config.RunConfig.to_dict)."""
SPLITS_FILE = "splits.json"
"""The case ids of the train, val and test splits, written at the run's start."""
SUMMARY_FILE = "summary.json"
"""The finished run's results (RunSummary), written once, at its end."""
REPORT_FILE = "report.md"
"""The finished run's report for people (trainer.reports.report)."""
CHECKPOINTS_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"
"""Under CHECKPOINTS_DIR: the newest checkpoint (a hard link), what a resume starts from."""
BEST_CHECKPOINT = "best.pt"
"""Under CHECKPOINTS_DIR: the checkpoint of the best validation MAE, what is evaluated."""
LAUNCH_FILE = "launch.json"
"""Written by `fab train` (and a sweep's driver for its trials): LaunchRecord."""
LAUNCH_DEADLINE = "deadline"
"""launch.json's key: unix seconds after which nothing starts the run again (the
boxes' cloud-side hard stop is then)."""
LAUNCH_PRICES = "hourly_prices_usd"
"""launch.json's key: "<size> <market>" -> one box's hourly price, the stack's candidates'."""
TB_DIR = "tb"
"""The run's TensorBoard event files (trainer.reports.progress), mirrored with the run."""
PLOTS_DIR = "plots"
"""The finished run's plots (`*.png`, report.md shows them); a sweep's folder has one."""
RUN_LOG_FILE = "train.log"
"""What `train` printed (trainer.checkpoints.run_log), mirrored beside the checkpoints:
`fab logs` reads it from the store once no container holds the run."""
RUN_LOG_ROTATED = RUN_LOG_FILE + ".1"
"""The part before, once train.log reached its cap."""
STOPPED_BY_USER = "STOPPED_BY_USER"
"""Written by `fab stop`: nothing restarts this run. Never mirrored (restored on another
box it would block the resume), never restored."""

# status.json's `state`.
STATE_RUNNING = "running"
STATE_PREEMPTED = "preempted"
"""Stopped by a spot notice, with a checkpoint written (exit EXIT_STOPPED)."""
STATE_STOPPED = "stopped"
"""Stopped on request (SIGTERM, `fab stop`), with a checkpoint written (EXIT_STOPPED)."""
STATE_FINISHED = "finished"
STATE_UPLOAD_PENDING = "finished-upload-pending"
"""A run that finished, its last uploads not all landed (storage down at the end, or
killed during them): its container, started again, only uploads what the store lacks
(`python -m trainer sync` does the same). Where the box gave up starting it, storage's
status.json names the files it lacks (UPLOADS_MISSING)."""
STATE_FAILED = "failed"
STATES = (
    STATE_RUNNING, STATE_PREEMPTED, STATE_STOPPED, STATE_FINISHED, STATE_UPLOAD_PENDING,
    STATE_FAILED,
)  # fmt: skip
END_STATES = (STATE_STOPPED, STATE_FINISHED, STATE_UPLOAD_PENDING, STATE_FAILED)
"""The states that say how a run ended: STATES but those of a run that starts again
(RECOVERED_FROM). The box stores a failed run's end only over none of these
(box/stored_end.py)."""
FINISHED_STATES = (STATE_FINISHED, STATE_UPLOAD_PENDING)
"""A run that trained to its end, its summary written: its results are whole on its box,
in storage only once the state is STATE_FINISHED."""
UPLOADS_MISSING = "missing"
"""status.json's `uploads` key, where the box gave up on a finished run's last uploads
(box/unfinished_uploads.py): the files its folder in storage lacks, by name."""
TRIAL_RUNNING, TRIAL_COMPLETE, TRIAL_PRUNED, TRIAL_FAIL, TRIAL_WAITING = (
    STATE_RUNNING, "complete", "pruned", "fail", "waiting",
)  # fmt: skip
TRIAL_STATES = (TRIAL_RUNNING, TRIAL_COMPLETE, TRIAL_PRUNED, TRIAL_FAIL, TRIAL_WAITING)
"""A sweep trial's `state` in its sweep's trials.json: Optuna's TrialState, lower case,
`pruned` also for a trial the sweep stopped while it ran."""
PREPARE_HEARTBEAT = (".prepare", HEARTBEAT_FILE)
"""Under BOX_ROOT/datasets/<name>: a `fab prepare-data` container's progress."""

# On the cloud.
DEADLINE_TAG = "glucose-deadline"
DEADLINE_TAG_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""Azure VM tag: the run's deadline in UTC as DEADLINE_TAG_FORMAT (`YYYY-MM-DDTHH:MM:SSZ`,
what the keeper's Logic App reads with `ticks()`). Until then the stack's
keeper workflow starts an evicted VM again; at it, the keeper deallocates the VM. Who
stops a box on purpose (the idle watchdog, `fab stop`, the budget stop) deletes it
first, so the keeper never undoes a stop that was asked for."""

# Containers.
WORKSPACE = "/workspace"
"""Where a container sees the box root's folders: `runs/<run_id>`, `datasets/<name>`,
`sweeps/<id>` under it as under BOX_ROOT."""
WORKSPACE_BOX_RECORDS = f"{WORKSPACE}/box"
"""The box's records (BOX_ROOT/WATCHDOG_DIR's boots and stops), read-only: a run's cost."""
WORKSPACE_BOX_RUNS = f"{WORKSPACE}/box-runs"
"""BOX_ROOT/runs, read-only in a trainer's container: the runs it shares the box with."""
TRAIN_CONTAINER_PREFIX = "glucose-train-"
RUN_ID_LABEL = "glucose-training.run-id"
PREPARE_CONTAINER_PREFIX = "glucose-prepare-"
PREPARE_LABEL = "glucose-training.prepare"
SWEEP_CONTAINER_PREFIX = "glucose-sweep-"
SWEEP_LABEL = "glucose-training.sweep"
"""A sweep's driver (`python -m trainer sweep`): restarted by the resume unit as a
trainer is (exit 75, or killed with the host while its status says running); busy
while its status.json's step (its trials' steps added up) moves."""
STOP_TIMEOUT_SECONDS = 120
"""`docker stop`'s grace: longer than the trainer's 100 s to checkpoint and upload."""

# Run ids and dataset names: a container name, a path part and a shell word at once.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)"

# Exit codes of `python -m trainer` (sysexits.h where one fits); status.json's
# `exit_code` is always the process's. trainer.exit_codes says which error gets which.
EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_USER_ERROR = 2
"""A mistake the user can fix (a bad flag, a bad dataset, an incompatible resume)."""
EXIT_BOXES_AWAY = 69
"""EX_UNAVAILABLE: a multi-node run's boxes did not all meet in the rendezvous's time
(one of them evicted and not back yet): the resume unit starts it again, a minute
apart, until the run's deadline."""
EXIT_UNWRITABLE = 74
"""EX_IOERR: the run dir cannot be written (disk full, read-only, no access)."""
EXIT_STOPPED = 75
"""EX_TEMPFAIL: stopped or preempted with a checkpoint written: the box's resume unit
starts it again (the only thing that does; docker's restart policy is `no`)."""

# Leases: BOX_ROOT/leases/<name>.json keeps the idle watchdog off for a while.
LEASE_FIELDS = ("written_at", "minutes", "reason")
"""`written_at` in unix seconds on the box's clock, `minutes` how long, `reason` why."""
MAX_LEASE_MINUTES = 12 * 60
"""Whatever a lease says, the watchdog stops counting it after this."""
HOLD_LEASE = "hold"
"""`fab hold`'s lease; `fab train` writes `train-<run_id>` while it starts a run."""

# The watchdog's verdict on AWS, which the CloudWatch idle alarm reads.
VERDICT_NAMESPACE = "GlucoseTraining"
VERDICT_METRIC = "Busy"
"""1 busy, 0 idle, every minute."""
VERDICT_DIMENSION = "InstanceId"


def name_problem(value: object, what: str, kind: str = "run id") -> str | None:
    """Why `value` is no usable `kind` (a run id or a dataset name: the same rule),
    naming `what` (the flag or file it came from), else None."""
    if isinstance(value, str) and NAME_PATTERN.fullmatch(value):
        return None
    return f"{what} {value!r} is not a usable {kind}; expected {NAME_RULE}"


def run_dir(box_root: str, run_id: str) -> str:
    return f"{box_root}/{RUNS_DIR}/{run_id}"


def workspace_path(*parts: str) -> str:
    """`workspace_path(RUNS_DIR, run_id)`: where a container sees that folder."""
    return "/".join((WORKSPACE, *parts))


def run_uri(storage_uri: str, run_id: str) -> str:
    """A run's folder in storage (`<storageUri>/runs/<id>`): the run dir's mirror and its
    checkpoints, what `fab train` passes the trainer as `--checkpoint-uri`."""
    return f"{storage_uri.rstrip('/')}/{RUNS_DIR}/{run_id}"


def sweep_uri(storage_uri: str, sweep_id: str) -> str:
    """A sweep's folder in storage, which its driver mirrors (trainer.sweep.mirror)."""
    return f"{storage_uri.rstrip('/')}/{SWEEPS_DIR}/{sweep_id}"


def sweep_dir(box_root: str, sweep_id: str) -> str:
    return f"{box_root}/{SWEEPS_DIR}/{sweep_id}"


def dataset_dir(box_root: str, name: str) -> str:
    return f"{box_root}/{DATASETS_DIR}/{name}"


def lease_path(box_root: str, name: str) -> str:
    return f"{box_root}/{LEASES_DIR}/{name}.json"


def lease_record(written_at: int, minutes: int, reason: str) -> dict:
    """A lease as `fab` writes it (LEASE_FIELDS)."""
    return {"written_at": written_at, "minutes": minutes, "reason": reason}


def lease_until(lease: object) -> float | None:
    """When a lease record stops counting (capped at MAX_LEASE_MINUTES), or None when
    it is no lease: not an object, or no positive `minutes` and numeric `written_at`."""
    if not isinstance(lease, dict):
        return None
    written_at, minutes = lease.get("written_at"), lease.get("minutes")
    for value in (written_at, minutes):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
    if not minutes > 0:
        return None
    return written_at + min(minutes, MAX_LEASE_MINUTES) * 60


def finite_float(value: object) -> float | None:
    """A JSON number as a float; None for a bool, a non-number, infinity or NaN, or an
    integer of hundreds of digits (a hostile file's, which float() refuses)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


# The run dir's JSON records, typed. Each is written by the container or fab and read
# where nothing it holds is trusted: a key a file lacks, or holds with another type,
# reads as None, and `problems` says which keys a file held that could not be read.
WHOLE_NUMBER_LIMIT = 2**63
"""An int field holds less than this (either sign): a count, a step or a code, never a
hostile file's integer of hundreds of digits."""


@dataclass(frozen=True)
class _Reader:
    """How one field is read from JSON: which values it keeps, and what it expects."""

    keeps: Callable[[object], bool]
    expected: str
    many: str = ""
    """What a list of these is a list of."""


def _whole_number(value: object) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -WHOLE_NUMBER_LIMIT < value < WHOLE_NUMBER_LIMIT
    )


_PLAIN_READERS = {
    int: _Reader(_whole_number, "a whole number", "whole numbers"),
    float: _Reader(lambda value: finite_float(value) is not None, "a finite number", "numbers"),
    str: _Reader(lambda value: isinstance(value, str), "text", "texts"),
    bool: _Reader(lambda value: isinstance(value, bool), "true or false", "booleans"),
    dict: _Reader(lambda value: isinstance(value, dict), "an object", "objects"),
    list: _Reader(lambda value: isinstance(value, list), "a list", "lists"),
}


def _reader(annotation: object, where: str) -> _Reader:
    """The reader of a field annotated `X | None`, X one of _PLAIN_READERS' types or
    `list[X]`; TypeError naming the field for anything else (at import: a field added
    with a type no reader reads fails there, not on a user's file)."""
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if len(args) != 1 or type(None) not in get_args(annotation):
        raise TypeError(f"{where}: {annotation!r} is not `X | None`")
    kind = args[0]
    if kind in _PLAIN_READERS:
        return _PLAIN_READERS[kind]
    if get_origin(kind) is list and len(get_args(kind)) == 1:
        item = _PLAIN_READERS.get(get_args(kind)[0])
        if item is not None:
            return _Reader(
                lambda value: isinstance(value, list) and all(map(item.keeps, value)),
                f"a list of {item.many}",
            )
    raise TypeError(f"{where}: no reader for {kind!r}")


def _said(value: object) -> str:
    """A value a field could not read, in a few words (its text is the file's)."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else ("-" * (value < 0) + "Infinity")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return {str: "text", bool: "a boolean", dict: "an object", list: "a list"}.get(
        type(value), type(value).__name__
    )


class _Record:
    """A dataclass of a JSON file's keys, read without trusting the file. Each field is
    `X | None`; its reader comes from the annotation, resolved when the class is made."""

    FILE: ClassVar[str]
    """Its file in a run dir."""
    READERS: ClassVar[dict[str, _Reader]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hints = get_type_hints(cls)
        cls.READERS = {
            name: _reader(hint, f"{cls.__name__}.{name}")
            for name, hint in hints.items()
            if get_origin(hint) is not ClassVar
        }

    @classmethod
    def from_dict(cls: type[R], data: object) -> R:
        """The fields `data` holds with their types (`int | None`: an int; a bool is no
        number, and a number no bool; a float is finite); the others None."""
        if not isinstance(data, dict):
            return cls()
        kept = {
            name: data[name]
            for name, reader in cls.READERS.items()
            if data.get(name) is not None and reader.keeps(data[name])
        }
        return cls(**kept)

    @classmethod
    def problems(cls, data: object) -> list[str]:
        """What `from_dict` left out of `data` that was there: each key held with a value
        its field cannot read (`updated_at is NaN, not a finite number`)."""
        if not isinstance(data, dict):
            return [f"holds {_said(data)}, not an object"]
        return [
            f"{name} is {_said(data[name])}, not {reader.expected}"
            for name, reader in cls.READERS.items()
            if data.get(name) is not None and not reader.keeps(data[name])
        ]

    @classmethod
    def checked(cls: type[R], text: str | bytes | None) -> tuple[R, list[str]]:
        """The record in `text` and what of it could not be read (a torn file, one
        nested past what json follows, a key of another type); an empty record and no
        problem for None (no file)."""
        if text is None:
            return cls(), []
        try:
            data = json.loads(text)
        except RecursionError:
            return cls(), ["nested too deep to read"]
        except ValueError:
            return cls(), ["not JSON (torn?)"]
        return cls.from_dict(data), cls.problems(data)

    @classmethod
    def parse(cls: type[R], text: str | bytes | None) -> R:
        """The record in `text`; an empty one for None, a torn file, one nested past what
        json follows, or another shape."""
        return cls.checked(text)[0]

    @classmethod
    def read(cls: type[R], run_dir: Path, name: str = "") -> R:
        """The record in `run_dir`'s FILE (or `name`); an empty one when unreadable."""
        try:
            return cls.parse((Path(run_dir) / (name or cls.FILE)).read_bytes())
        except OSError:
            return cls()


R = TypeVar("R", bound=_Record)


RECOVERED_FROM = (STATE_PREEMPTED, STATE_RUNNING)
"""What a run that starts again was, when it did not ask to stop: evicted after a notice,
or still `running` when its box went down under it."""


@dataclass(frozen=True)
class RunRecord(_Record):
    """What status.json (or heartbeat.json) says. The trainer writes it
    (trainer.reports.status), `fab status` and the box's watchdog and resume unit read it."""

    FILE: ClassVar[str] = STATUS_FILE

    run_id: str | None = None
    state: str | None = None
    """One of STATES."""
    epoch: int | None = None
    step: int | None = None
    total_steps: int | None = None
    train_loss: float | None = None
    val_mae: float | None = None
    windows_per_s: float | None = None
    gpu_memory_gib: float | None = None
    """Peak GPU memory this process reserved (torch's allocator); None on the CPU."""
    eta_s: float | None = None
    last_checkpoint_at: float | None = None
    """Unix seconds."""
    updated_at: float | None = None
    """Unix seconds of the last write."""
    exit_code: int | None = None
    uploads: dict | None = None
    """None without --checkpoint-uri, else `pending`, `failing_since`, `last_uploaded_at`."""
    recoveries: int | None = None
    """Starts after a stop the run did not ask for (a spot eviction, a host failure)."""
    time_lost_s: float | None = None
    """Seconds between those stops and the starts that followed them, summed."""
    ran: list | None = None
    """[start, last write] of each process that trained the run (unix s), oldest first:
    the spans its dollars count (trainer.reports.cost)."""

    @classmethod
    def from_dict(cls, data: object) -> RunRecord:
        record = super().from_dict(data)
        return record if record.state in (None, *STATES) else replace(record, state=None)

    @classmethod
    def problems(cls, data: object) -> list[str]:
        state = data.get("state") if isinstance(data, dict) else None
        unknown = isinstance(state, str) and state not in STATES
        return [*super().problems(data), *[f"state {state!r} is no run state"] * unknown]

    def uploads_unsettled(self, exit_code: int) -> bool:
        """Whether the run said it finished, its last uploads not known to have landed,
        its container having exited `exit_code`: it says STATE_UPLOAD_PENDING, or
        `finished` with an exit other than 0 (killed between its last upload and its exit;
        a run without a store, `uploads` null, has none to land)."""
        if self.state == STATE_UPLOAD_PENDING:
            return True
        finished = self.state == STATE_FINISHED and self.uploads is not None
        return finished and exit_code != EXIT_FINISHED

    def missing_uploads(self) -> list[str] | None:
        """The files storage lacks, as the box named them (UPLOADS_MISSING); None where
        none are named (the trainer's own record: the box had not listed them yet), or
        not as a list of texts."""
        named = (self.uploads or {}).get(UPLOADS_MISSING)
        if isinstance(named, list) and all(isinstance(name, str) for name in named):
            return named
        return None

    def after_restart(self, now: float) -> dict[str, Any]:
        """`recoveries` and `time_lost_s` for a new start of the run this record is of:
        one more when the run was preempted or died running (its box went down with it),
        the time since it last said anything lost to that."""
        recoveries, lost = self.recoveries or 0, self.time_lost_s or 0.0
        if self.state in RECOVERED_FROM:
            recoveries += 1
            lost += max(0.0, now - (self.updated_at or now))
        return {"recoveries": recoveries, "time_lost_s": round(lost, 1)}

    def known(self) -> dict[str, Any]:
        """The keys the file had (with their types), as a dict."""
        return {key: value for key, value in asdict(self).items() if value is not None}


STATUS_KEYS = tuple(field.name for field in fields(RunRecord))


@dataclass(frozen=True)
class LaunchRecord(_Record):
    """launch.json, written by `fab train` (ops.run.launch) before the run's first start
    and kept by every resume, or by a sweep's driver for a trial (trainer.sweep.trials):
    what was launched, when first, and at what price (the run's cost counts from it)."""

    run_id: str | None = None
    name: str | None = None
    image: str | None = None
    dataset: str | None = None
    data_uri: str | None = None
    """Where the dataset was fetched from (`fab train --run ID` fetches it there again);
    None in records from before it was kept: `<storageUri>/datasets/<dataset>`."""
    trainer_args: list | None = None
    """The `train` flags of the run's last start (a resume may change some: `fab train`)."""
    started_at: float | None = None
    """Unix seconds of the run's first start."""
    hourly_price_usd: float | None = None
    """One box's price at launch: what a boot with no size on record costs."""
    hourly_prices_usd: dict | None = None
    """LAUNCH_PRICES: "<size> <market>" -> one box's hourly price."""
    spot: bool | None = None
    boxes: int | None = None
    """Boxes the run trains on (each priced the same); None: one."""
    world_size: int | None = None
    deadline: float | None = None
    """LAUNCH_DEADLINE."""
    sweep: str | None = None
    """The sweep whose trial this run is; then `trial`, its `values` and how many trials
    share the box (`concurrent_trials`)."""
    trial: int | None = None
    values: dict | None = None
    concurrent_trials: int | None = None

    FILE: ClassVar[str] = LAUNCH_FILE

    def to_json(self) -> dict[str, Any]:
        """The keys the record was given (None: left out)."""
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class RunSummary(_Record):
    """summary.json: a finished run's results (trainer.reports.summary writes it, once);
    `fab runs`, the box's notice of the run's end and a sweep's choice read it."""

    run_id: str | None = None
    name: str | None = None
    best_epoch: int | None = None
    """The epoch (and `best_step` the step) of the best validation MAE: what val and test
    score."""
    best_step: int | None = None
    steps: int | None = None
    epochs: int | None = None
    parameters: int | None = None
    device: str | None = None
    precision: str | None = None
    wall_s: float | None = None
    """Summed over the run's processes, each of which `processes` lists."""
    processes: list | None = None
    data: dict | None = None
    """The dataset's source, cases, windows and fingerprint."""
    world_size: int | None = None
    per_rank_batch_size: int | None = None
    global_batch_size: int | None = None
    lr: float | None = None
    formulation: str | None = None
    gpu_memory_gib: float | None = None
    recoveries: int | None = None
    time_lost_s: float | None = None
    cost_usd: float | None = None
    """None off a box (no boot and stop records); `cost` says how it was counted."""
    cost: dict | None = None
    val: dict | None = None
    """The validation split's metrics (`mae` in mg/dL, ...), beside the baseline's."""
    test: dict | None = None
    """The test split's; None for a sweep's trial (`--skip-test`)."""

    FILE: ClassVar[str] = SUMMARY_FILE

    def to_json(self) -> dict[str, Any]:
        """Every key, null where None."""
        return asdict(self)

    @property
    def val_mae(self) -> float | None:
        """The validation MAE; None where it is no finite number (finite_float)."""
        return finite_float((self.val or {}).get("mae"))
