"""The box's contract: every name the box programs, `fab` and the trainer agree on.

One definition each: the box programs, `ops/`, `stack/`, `pulumi/` and the packer import
it as `box.contract`. The trainer image cannot import it and
keeps its own copies of the few names it needs (exit codes, the status and heartbeat
files, the user's stop marker): tests/box/test_contract.py proves each copy equal.

Standard library only, Python 3.10+ (MIN_PYTHON), and no import of ours.
"""

from __future__ import annotations

import re

MIN_PYTHON = (3, 10)
"""The oldest python3 the box programs run on (they use zoneinfo, 3.9+): Ubuntu 22.04's,
the oldest of the images the stacks boot (the AWS Deep Learning AMI and plain Ubuntu
22.04, Azure's ubuntu-hpc 2204). install.py refuses an older one."""

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

# In a run dir (BOX_ROOT/runs/<run_id>).
STATUS_FILE = "status.json"
"""Rank 0's record of the run (trainer.reports.status)."""
HEARTBEAT_FILE = "heartbeat.json"
"""`{"step", "updated_at"}` of a box whose ranks write no status.json."""
UPLOAD_PENDING_STATE = "finished-upload-pending"
"""status.json's `state` of a run that finished while storage was down: its container,
started again, only uploads what the store lacks (trainer.reports.status' copy)."""
FAILED_STATE = "failed"
"""status.json's `state` of a run that failed (with its `exit_code`)."""
END_STATES = ("stopped", "finished", UPLOAD_PENDING_STATE, FAILED_STATE)
"""status.json's `state`s that say how a run ended: trainer.reports.status.STATES but
those of a run that starts again (`running`, `preempted`). The box stores a failed run's
end only over none of these (box/stored_end.py)."""
LAUNCH_FILE = "launch.json"
"""Written by `fab train`: the first start, the image, the dataset, the price, and the
run's deadline (LAUNCH_DEADLINE)."""
LAUNCH_DEADLINE = "deadline"
"""launch.json's key: unix seconds after which nothing starts the run again (the
boxes' cloud-side hard stop is then)."""
STOPPED_BY_USER = "STOPPED_BY_USER"
"""Written by `fab stop`: nothing restarts this run."""
PREPARE_HEARTBEAT = (".prepare", "heartbeat.json")
"""Under BOX_ROOT/datasets/<name>: a `fab prepare-data` container's progress."""

# In the stack's storage (stack.storage_layout: `<storageUri>/runs/<run_id>/`).
RUNS_PREFIX = "runs"
"""Runs' folders in storage: what the trainer mirrors, `fab train`'s launch record and,
for a run that failed before the trainer stored how it ended, the box's status.json."""

# On the cloud.
DEADLINE_TAG = "glucose-deadline"
DEADLINE_TAG_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""Azure VM tag: the run's deadline in UTC as DEADLINE_TAG_FORMAT (`YYYY-MM-DDTHH:MM:SSZ`,
what the keeper's Logic App reads with `ticks()`). Until then the stack's
keeper workflow starts an evicted VM again; at it, the keeper deallocates the VM. Who
stops a box on purpose (the idle watchdog, `fab stop`, the budget stop) deletes it
first, so the keeper never undoes a stop that was asked for."""

# Containers.
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

# Exit codes of `python -m trainer` (trainer.exit_codes is the trainer's copy).
EXIT_FINISHED = 0
EXIT_USER_ERROR = 2
EXIT_BOXES_AWAY = 69
"""A multi-node run's boxes did not all meet in the rendezvous's time: the resume unit
starts it again, a minute apart, until the run's deadline."""
EXIT_UNWRITABLE = 74
EXIT_STOPPED = 75
"""Stopped with a checkpoint written: the box's resume unit starts it again."""

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
