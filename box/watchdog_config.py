"""The box's settings: one JSON file written by cloud-init from the stack config.

Shared by the watchdog and the resume unit. Every endpoint and command is a field,
so the tests point the real programs at fakes on 127.0.0.1 and on PATH. The
Pulumi side (`stack/cloud_init.py`) builds the file through this class too,
so a bad setting fails at `pulumi preview`, not silently on the box.

Standard library only, Python 3.10+ (contract.MIN_PYTHON: the box's own python3
runs it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from box import contract

CONFIG_ENV = "GLUCOSE_WATCHDOG_CONFIG"
CLOUDS = ("aws", "azure", "local")
MAX_HTTP_TIMEOUT_SECONDS = 10
# The deallocate the watchdog and the budget stop's Logic App call: the
# Microsoft.Compute version azure-native declares the VMs with, one a reference knows.
ARM_API_VERSION = "2024-11-01"
# ARM's tags of a resource, where whoever stops a box on purpose (the watchdog, the
# budget stop's and the keeper's Logic Apps) deletes its run deadline tag.
ARM_TAGS_PATH = "/providers/Microsoft.Resources/tags/default"
ARM_TAGS_API_VERSION = "2021-04-01"
STORAGE_SCHEMES = ("s3://", "az://", "file://")
"""What a storage_uri may start with (the trainer's stores'; box/stored_end.py writes each)."""
DAILY_TIME = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
"""The daily stop's HH:MM, 24 h: the stack's autoShutdownTime, watchdog.json's
daily_stop_time."""


def daily_time(text: str) -> tuple[int, int]:
    """(hours, minutes) of an HH:MM daily time; ValueError for anything else."""
    match = DAILY_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is no HH:MM on a 24 h clock")
    return int(match[1]), int(match[2])


@dataclasses.dataclass(frozen=True)
class GuardSetting:
    """One guard-rail setting under each of its names, with the default a stack gets."""

    box_key: str
    """Its WatchdogConfig field and watchdog.json key."""
    stack_key: str
    """Its stack config key (`glucose-training:<key>`), also the stack output `fab
    box-update` renders a running box's settings from; the StackConfig field it sets
    names this setting (stack/config.py)."""
    default: Any
    """What a stack that leaves it out gets; its type is the setting's."""
    limits: tuple[int, int] | None = None
    """The lowest and highest value a stack or `fab box-update` may give it (minutes)."""

    def problem(self, value: Any) -> str | None:
        """One line naming what is wrong with `value` for this setting, or None."""
        if self.limits is None or value is None:
            return None
        low, high = self.limits
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"{self.stack_key}: got {value!r}, expected {low} to {high}"
        return None


GUARD_SETTINGS = (
    GuardSetting("idle_shutdown_minutes", "idleShutdownMinutes", 30, (5, 24 * 60)),
    # A run whose step has not moved this long is hung: the watchdog stops counting it.
    GuardSetting("hung_trainer_minutes", "hungTrainerMinutes", 120, (10, 24 * 60)),
    # How long a box of a multi-node run tries to meet its other boxes in a boot.
    GuardSetting("peer_wait_minutes", "peerWaitMinutes", 30, (5, 24 * 60)),
    GuardSetting("daily_stop_time", "autoShutdownTime", "23:00"),
    GuardSetting("daily_stop_time_zone", "autoShutdownTimeZone", "UTC"),
)
GUARD_DEFAULTS = {setting.box_key: setting.default for setting in GUARD_SETTINGS}


def guard_problems(values: dict[str, Any]) -> list[str]:
    """What is out of its range among `values` (box keys), one line each: the same rule
    for a stack (stack.config) and for the settings `fab box-update` renders."""
    return [
        problem
        for setting in GUARD_SETTINGS
        if (problem := setting.problem(values.get(setting.box_key))) is not None
    ]


@dataclasses.dataclass(frozen=True)
class WatchdogConfig:
    cloud: str
    """`aws` (stop = OS shutdown), `azure` (stop = ARM deallocate) or `local` (OS shutdown)."""
    idle_shutdown_minutes: int
    """Stop billing after the box has been idle this long in a row."""
    hung_trainer_minutes: int = GUARD_DEFAULTS["hung_trainer_minutes"]
    """A running trainer whose step has not advanced for this long counts as hung (idle)."""
    peer_wait_minutes: int = GUARD_DEFAULTS["peer_wait_minutes"]
    """A box of a multi-node run whose other boxes do not meet (exit 69) tries again for
    this long in a boot, then no more: it idles into its stop instead of billing until
    the run's deadline."""
    gpu_busy_percent: int = 10
    """GPU utilisation at or above this (any GPU) makes the box busy."""
    box_root: str = contract.BOX_ROOT
    imds_url: str = "http://169.254.169.254"
    """Instance metadata service of either cloud (same link-local address on both)."""
    arm_url: str = "https://management.azure.com"
    arm_resource: str = "https://management.azure.com/"
    """Audience of the managed-identity token for ARM."""
    arm_api_version: str = ARM_API_VERSION
    identity_client_id: str = ""
    """Client id of a user-assigned identity; empty uses the VM's system-assigned one."""
    http_timeout_seconds: float = 5.0
    """Per request, cut to MAX_HTTP_TIMEOUT_SECONDS (the watchdog's worst case assumes it)."""
    docker_command: str = "docker"
    docker_wait_seconds: int = 180
    """How long the resume unit waits for the docker engine after boot."""
    nvidia_smi_command: str = "nvidia-smi"
    aws_command: str = "aws"
    shutdown_command: tuple = ("shutdown", "-h", "now")
    cloudwatch_namespace: str = contract.VERDICT_NAMESPACE
    cloudwatch_metric: str = contract.VERDICT_METRIC
    """The watchdog's verdict, 1 busy / 0 idle, that the AWS idle alarm reads."""
    proc_root: str = "/proc"
    """Where session processes are checked for life, and `stat` gives the boot time."""
    boot_id_path: str = "/proc/sys/kernel/random/boot_id"
    """Idle time never carries over a reboot: the state is reset when this changes."""
    utmp_path: str = "/run/utmp"
    """Login records: sshd writes one per terminal session (a user cannot forge one)."""
    state_path: str = ""
    """The countdown. Unset: on tmpfs (contract.RUN_STATE_DIR) for the box's own BOX_ROOT, else
    under `box_root`/watchdog: a test seam that moves `box_root` (checks outside this repo
    run the real watchdog against a fake box that way) keeps all of its files there."""
    resume_state_path: str = ""
    """The resume unit's restart attempts in this boot (its retries are bounded); unset
    as `state_path`."""
    daily_stop_time: str = ""
    """HH:MM of the cloud's daily stop ("" unknown), to name that stop in the records."""
    daily_stop_time_zone: str = GUARD_DEFAULTS["daily_stop_time_zone"]
    notify_webhook: str = ""
    """Where a run's end is POSTed as `{"text": ...}` (Slack, Teams); "" none (box/notify.py)."""
    notify_topic_arn: str = ""
    """AWS: the stack's SNS topic that mails alertEmails a run's end; "" none."""
    sns_url: str = ""
    """SNS's endpoint; "" the topic's region's (https://sns.REGION.amazonaws.com)."""
    first_choice: str = ""
    """"<size> <market>" the stack asks for first (vmSize, spot or on-demand): a boot on
    anything else is told to the channels above (box/boot_record.py); "" never."""
    storage_uri: str = ""
    """The stack's storageUri (`s3://BUCKET`, `az://ACCOUNT/CONTAINER`, either with a
    folder under it; `file:///DIR` for the end watch on this machine): where the end of a
    run that failed before its trainer stored one is written (box/stored_end.py); ""
    nowhere."""
    storage_region: str = ""
    """AWS: the bucket's region, which the requests are signed for."""
    storage_endpoint: str = ""
    """The store's endpoint; "" the cloud's own (https://BUCKET.s3.REGION.amazonaws.com,
    https://ACCOUNT.blob.core.windows.net). The tests point it at moto or Azurite."""

    def __post_init__(self) -> None:
        for name, file in (
            ("state_path", "watchdog-state.json"),
            ("resume_state_path", "resume-state.json"),
        ):
            if not getattr(self, name):
                home = (
                    contract.RUN_STATE_DIR
                    if self.box_root == contract.BOX_ROOT
                    else f"{self.box_root}/{contract.WATCHDOG_DIR}"
                )
                object.__setattr__(self, name, f"{home}/{file}")
        problems = []
        if self.cloud not in CLOUDS:
            problems.append(f"cloud is {self.cloud!r}, expected one of {', '.join(CLOUDS)}")
        for name in ("idle_shutdown_minutes", "hung_trainer_minutes", "peer_wait_minutes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{name} is {value!r}, expected a whole number of minutes >= 1")
        if not 0 < self.gpu_busy_percent <= 100:
            problems.append(f"gpu_busy_percent is {self.gpu_busy_percent!r}, expected 1..100")
        for name in ("box_root", "state_path", "resume_state_path"):
            if not os.path.isabs(getattr(self, name)):
                problems.append(f"{name} is {getattr(self, name)!r}, expected an absolute path")
        if not self.http_timeout_seconds > 0:
            problems.append(f"http_timeout_seconds is {self.http_timeout_seconds!r}, expected > 0")
        if self.daily_stop_time and not DAILY_TIME.fullmatch(self.daily_stop_time):
            problems.append(f"daily_stop_time is {self.daily_stop_time!r}, expected HH:MM")
        problems += self._storage_problems()
        for name in ("notify_webhook", "sns_url", "storage_endpoint"):
            if getattr(self, name) and not getattr(self, name).startswith(("https://", "http://")):
                problems.append(f"{name} is {getattr(self, name)!r}, expected an http(s) URL")
        if self.notify_topic_arn and not self.notify_topic_arn.startswith("arn:aws:sns:"):
            problems.append(f"notify_topic_arn is {self.notify_topic_arn!r}, expected an SNS ARN")
        if not self.shutdown_command:
            problems.append("shutdown_command is empty, expected a command line")
        if problems:
            raise ValueError("watchdog config: " + "; ".join(problems))
        object.__setattr__(self, "shutdown_command", tuple(self.shutdown_command))

    def _storage_problems(self) -> list[str]:
        if self.storage_uri and not self.storage_uri.startswith(STORAGE_SCHEMES):
            return [
                f"storage_uri is {self.storage_uri!r}, expected one starting with "
                + ", ".join(STORAGE_SCHEMES)
            ]
        if self.storage_uri.startswith("s3://") and not self.storage_region:
            return [
                "storage_region is empty, expected the bucket's region for an s3:// storage_uri"
            ]
        return []

    @property
    def request_timeout_seconds(self) -> float:
        return min(self.http_timeout_seconds, MAX_HTTP_TIMEOUT_SECONDS)

    @property
    def runs_dir(self) -> Path:
        return Path(self.box_root) / contract.RUNS_DIR

    @property
    def datasets_dir(self) -> Path:
        """`fab prepare-data` prepares into datasets/<name> (written as the SSH user)."""
        return Path(self.box_root) / contract.DATASETS_DIR

    @property
    def sweeps_dir(self) -> Path:
        """`fab sweep`'s sweeps (written as the SSH user)."""
        return Path(self.box_root) / contract.SWEEPS_DIR

    @property
    def leases_dir(self) -> Path:
        """`fab train` and `fab hold` leave leases here (written as the SSH user)."""
        return Path(self.box_root) / contract.LEASES_DIR

    @property
    def stops_path(self) -> Path:
        """Why the box stopped, one JSON line per stop; on disk, so it survives reboots."""
        return Path(self.box_root) / contract.WATCHDOG_DIR / contract.STOPS_FILE

    @property
    def boots_path(self) -> Path:
        """When the box came up, one JSON line per boot (boot_record.py)."""
        return Path(self.box_root) / contract.WATCHDOG_DIR / contract.BOOTS_FILE

    def to_json(self) -> str:
        """The settings that differ from the defaults: the rest are the programs' own, and
        the file is part of the boxes' size-limited user data."""
        # Against the defaults this box would get, derived paths included.
        plain = WatchdogConfig(self.cloud, self.idle_shutdown_minutes, box_root=self.box_root)
        fields = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.default is dataclasses.MISSING
            or getattr(self, field.name) != getattr(plain, field.name)
        }
        if self.box_root != contract.BOX_ROOT:  # the one default the comparison cannot see
            fields["box_root"] = self.box_root
        if "shutdown_command" in fields:
            fields["shutdown_command"] = list(self.shutdown_command)
        return json.dumps(fields, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> WatchdogConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(
                f"watchdog config: unknown keys {unknown}, expected some of {sorted(known)}"
            )
        return cls(**fields)


def load_config() -> WatchdogConfig:
    """Read the config named by $GLUCOSE_WATCHDOG_CONFIG (default contract.WATCHDOG_CONFIG_PATH)."""
    path = os.environ.get(CONFIG_ENV, contract.WATCHDOG_CONFIG_PATH)
    with open(path, encoding="utf-8") as handle:
        return WatchdogConfig.from_dict(json.load(handle))


def load_config_or_say_why(program: str) -> WatchdogConfig | None:
    """The config, or None after one line on stderr naming what is wrong with it."""
    try:
        return load_config()
    except (OSError, ValueError, TypeError) as error:
        print(f"{program}: cannot use the config: {error}", file=sys.stderr)
        return None
