"""Box programs and settings to running boxes, without a reboot; and whether a box is behind.

A box installs its programs once, at first boot, from the archive in the stack's
storage (box/bootstrap.py), and `pulumi up` deliberately leaves existing boxes alone.
`fab box-update` sends the archive this checkout builds (stack/box_packing.py) and the
stack's settings over SSH and installs them the way the first boot does: as root, with
the archive's own install.py (room checked first, the new set unpacked beside the old,
checked to start, then switched in one step), then the new `setup-box.sh ... guard`:
the same "guard on" as a first boot (box root and its ownership, systemd reloaded,
units enabled, timers restarted, the stop recorder started).

`/etc/glucose-training/box-version.json` records what a box runs; `fab train` compares
it with this checkout and says when the box is behind.

On the box, every path is prefixed with `$GLUCOSE_BOX_FS_ROOT` when it is set: only
the tests set it, through their sshd, to install into a temporary tree (and put a
`systemctl` that records what systemd would have been asked first on PATH).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import shlex
from dataclasses import dataclass
from typing import Any

from invoke.exceptions import Exit
from rich.console import Console

from box import contract
from box.watchdog_config import GUARD_SETTINGS, WatchdogConfig
from ops.remote.boxes import nodes
from ops.remote.ssh import Box
from ops.target.schema import Target
from stack import box_packing
from stack.cloud_init import box_storage_settings
from stack.outputs import NOTIFY_OUTPUTS
from stack.placement import first_choice

CLOUDS = ("aws", "azure")
# Settings the box programs have no default for: a box cannot run without them.
BOX_REQUIRED_SETTINGS = frozenset(
    field.name
    for field in dataclasses.fields(WatchdogConfig)
    if field.default is dataclasses.MISSING and field.name != "cloud"
)
FS_ROOT = '"${GLUCOSE_BOX_FS_ROOT:-}"'


def as_root(command: str) -> str:
    """`command` run as root without a password prompt (both clouds' default users may
    sudo)."""
    return f'if [ "$(id -u)" -eq 0 ]; then {command}; else sudo -n {command}; fi'


AS_ROOT = as_root("bash -s")
IDLE_SETTING = next(s for s in GUARD_SETTINGS if s.box_key == "idle_shutdown_minutes")
HEREDOC_END = "GLUCOSE_BOX_FILE_END"  # base64 and JSON never hold it
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class BoxSettings:
    """What the box's settings are rendered from: the cloud, and those guard settings
    that are known (the rest take the box programs' defaults)."""

    cloud: str
    guard: dict[str, Any]
    notify: dict[str, str] = dataclasses.field(default_factory=dict)
    """Where the box tells a run's end (stack.outputs.NOTIFY_OUTPUTS' box keys)."""
    storage: dict[str, str] = dataclasses.field(default_factory=dict)
    """Where the box stores a failed run's end (stack.cloud_init.box_storage_settings)."""


def settings_text(settings: BoxSettings) -> str:
    """The watchdog.json these settings make; Exit naming what does not fit."""
    try:
        return box_packing.settings_text(
            settings.cloud, settings.notify, settings.storage, **settings.guard
        )
    except ValueError as error:
        raise Exit(f"the box's settings do not fit: {error}") from None


def running_version(box: Box) -> dict | None:
    """The box's version record, or None when it has none (set up before box versions)."""
    text = _read(box, contract.VERSION_PATH)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def current_settings(box: Box) -> dict:
    """The box's own watchdog.json (empty when missing or unreadable)."""
    text = _read(box, contract.WATCHDOG_CONFIG_PATH)
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def _read(box: Box, path: str) -> str | None:
    """As root: the settings are root's alone (0600), for the secrets they may hold."""
    result = box.run(as_root(f"cat {FS_ROOT}{shlex.quote(path)}"), check=False)
    return result.stdout if result.exited == 0 else None


def settings_for(
    target: Target, outputs: dict[str, Any], overrides: dict[str, Any], box: Box
) -> BoxSettings:
    """Each guard setting from `overrides`, else the stack's outputs (or the target
    file's same keys), else the box's own watchdog.json; left out (cloud-init's
    default) where none has it. One-line Exit for a value that does not fit."""
    if target.cloud not in CLOUDS:
        raise Exit(
            f"{target.source} is cloud {target.cloud!r}: box-update is for boxes `pulumi up` "
            f"made ({' or '.join(CLOUDS)}), whose programs cloud-init installed"
        )
    on_box = current_settings(box)
    guard = {}
    for setting in GUARD_SETTINGS:
        key, flag = setting.box_key, "--" + setting.box_key.replace("_", "-")
        sources = (
            (flag, overrides.get(key)),
            (f"{target.source}'s {setting.stack_key}", outputs.get(setting.stack_key)),
            (f"{box.address}'s watchdog.json", on_box.get(key)),
        )
        found = next(((where, value) for where, value in sources if value is not None), None)
        if found is None:
            if key in BOX_REQUIRED_SETTINGS:
                raise Exit(
                    f"no {setting.stack_key}: {target.source} has none and {box.address} has "
                    f"no readable watchdog.json; pass {flag} N"
                )
            continue  # the box programs' own default
        where, value = found
        kind = type(setting.default)
        try:
            guard[key] = kind(value)
        except (TypeError, ValueError):
            raise Exit(f"{where} is {value!r}, expected {kind.__name__} for {key}") from None
    if target.cloud == "aws":
        _check_idle_alarm(outputs, guard)
    # From the stack, else what the box was told: an update never silences its messages.
    notify = {
        key: value
        for output, key in NOTIFY_OUTPUTS.items()
        if isinstance(value := outputs.get(output) or on_box.get(key), str) and value
    }
    # The stack's first choice (placementTried's first), else the box's: what a boot on
    # a fallback size is told against (box/boot_record.py).
    first = first_choice(target.placement_tried) or on_box.get("first_choice")
    if isinstance(first, str) and first:
        notify["first_choice"] = first
    return BoxSettings(target.cloud, guard, notify, _storage_settings(target, on_box))


STORAGE_SCHEMES = {"aws": "s3://", "azure": "az://"}
"""The storage a box's own identity writes, by cloud."""


def _storage_settings(target: Target, on_box: dict) -> dict[str, str]:
    """Where the box stores a failed run's end: the stack's storage (and region), else
    what the box was told; none where its identity could not write (or sign for) it."""
    uri = target.storage_uri or on_box.get("storage_uri")
    region = target.region or on_box.get("storage_region") or ""
    if not (isinstance(uri, str) and uri.startswith(STORAGE_SCHEMES[target.cloud])):
        return {}
    if not isinstance(region, str) or (target.cloud == "aws" and not region):
        return {}
    return box_storage_settings(target.cloud, uri, region)


def _check_idle_alarm(outputs: dict[str, Any], guard: dict[str, Any]) -> None:
    """On AWS the stack's CloudWatch idle alarm (pulumi/infra/aws/guard_rails.py) stops a
    box after the stack's idleShutdownMinutes of idle verdicts, whatever the box was told:
    a longer idle stop on the box would be cut short by it, so it is refused."""
    alarm = outputs.get(IDLE_SETTING.stack_key)
    told = guard.get(IDLE_SETTING.box_key)
    if isinstance(alarm, int) and isinstance(told, int) and told > alarm:
        raise Exit(
            f"--idle-shutdown-minutes {told} is longer than the stack's idle alarm, which stops "
            f"an AWS box after {alarm} idle minutes: set idleShutdownMinutes in the stack "
            "and run `pulumi up`, or pass at most that"
        )


def install_script(programs: box_packing.Programs, settings: str, ssh_user: str, cloud: str) -> str:
    """A root bash script: the archive and settings into a temporary directory, the
    archive's install.py over them, then the new set's guard on. The temporary
    directory holds the only copy written before install.py has checked the room."""
    archive = base64.b64encode(programs.archive).decode()
    current = f"{contract.PROGRAM_DIR}/{contract.CURRENT}/{box_packing.PACKAGE}"
    setup = FS_ROOT + shlex.quote(f"{current}/setup-box.sh")
    box_root = FS_ROOT + shlex.quote(contract.BOX_ROOT)
    guard = f"bash {setup} {shlex.quote(ssh_user)} {box_root} {shlex.quote(cloud)} guard"
    return (
        "\n".join(
            [
                "set -euo pipefail",
                "work=$(mktemp -d)",
                "trap 'rm -rf \"$work\"' EXIT",
                f"base64 -d > \"$work/programs.tar\" <<'{HEREDOC_END}'",
                archive,
                HEREDOC_END,
                f"cat > \"$work/watchdog.json\" <<'{HEREDOC_END}'",
                settings.rstrip("\n"),
                HEREDOC_END,
                f'tar -xf "$work/programs.tar" -C "$work" {" ".join(box_packing.INSTALLER)}',
                f'(cd "$work" && python3 -m {box_packing.PACKAGE}.install'
                ' "$work/programs.tar" "$work/watchdog.json")',
                # stdin is this script's own: setup-box.sh must not read the rest of it.
                f"{guard} </dev/null",
            ]
        )
        + "\n"
    )


REMOTE_COMMAND = f"base64 -d | gunzip | {{ {AS_ROOT}; }}"
"""What the box runs: the script comes on stdin, so its settings (a webhook URL is a
secret) are never on a command line, where `ps` shows them to every user of the box."""


def script_payload(script: str) -> str:
    """`script` as REMOTE_COMMAND reads it from stdin: gzip, then base64 (~60 KB)."""
    return base64.b64encode(gzip.compress(script.encode(), mtime=0)).decode()


def update_box(box: Box, programs: box_packing.Programs, settings: str) -> str:
    """Install `programs` with `settings` on `box` as root and turn its guard on; what
    install.py said. Exit with its one line when it refused (nothing changed then)."""
    target = box.target
    script = install_script(programs, settings, target.ssh_user, target.cloud)
    exit_code, said = box.run_with_input(REMOTE_COMMAND, script_payload(script), check=False)
    if exit_code != 0:
        lines = said.strip().splitlines() or ["no output"]
        installs = [line for line in lines if "glucose-install" in line]
        raise Exit(f"{box.address}: box-update failed: " + (installs or lines)[-1])
    return said.strip()


def each_box(target: Target) -> list[Box]:
    """Every node of the target (boxes K > 0 of a stack reached through box 0)."""
    return nodes(target)


def stale_warning(box: Box) -> str | None:
    """A line saying the box runs other box programs than this checkout, else None."""
    target = box.target
    if target.cloud not in CLOUDS:
        return None  # a lab box: not set up by our cloud-init
    running = running_version(box)
    if running is None:
        return (
            f"{box.address} has no box version record (set up before `fab box-update` "
            "existed); run `fab box-update` to bring its programs and settings up to date"
        )
    if running.get("programs") != box_packing.build_programs().sha256:
        return (
            f"{box.address} runs older (or other) box programs than this checkout "
            "(watchdog, resume unit); run `fab box-update`, no reboot needed"
        )
    return None


def warn_if_behind(box: Box) -> None:
    """Say so (on stderr) when the box runs other box programs than this checkout."""
    warning = stale_warning(box)
    if warning:
        console.print(f"[yellow]warning:[/] {warning}")
