"""Box programs and settings to running boxes, without a reboot; and whether a box is behind.

cloud-init installs `box/*`, their systemd units and the watchdog's
settings once, at a box's first boot, and `pulumi up` deliberately leaves existing
boxes alone. `fab box-update` renders the very same files (`box.cloud_init`, with the
stack's settings), writes them over SSH as root (each to a temporary name, then
renamed; the version file last), then runs the new `setup-box.sh ... guard`: the same
"guard on" as a first boot (box root and its ownership, systemd reloaded, units
enabled, timers restarted, the stop recorder started). The resume service is only
enabled: it acts at boot and by its timer.

`/etc/glucose-training/box-version.json` records what a box runs; `fab train` compares
it with this checkout and says when the box is behind.

On the box, every path is prefixed with `$GLUCOSE_BOX_FS_ROOT` when it is set: only
the tests set it, through their sshd, to install into a temporary tree (and put a
`systemctl` that records what systemd would have been asked first on PATH).
"""

from __future__ import annotations

import base64
import gzip
import inspect
import json
import shlex
import typing
from dataclasses import dataclass
from typing import Any

from invoke.exceptions import Exit
from rich.console import Console

from box import cloud_init
from ops.remote import Box, nodes
from ops.target import Target

CLOUDS = ("aws", "azure")
FS_ROOT = '"${GLUCOSE_BOX_FS_ROOT:-}"'
# Run as root without a password prompt (both clouds' default users may sudo).
AS_ROOT = 'if [ "$(id -u)" -eq 0 ]; then bash -s; else sudo -n bash -s; fi'
HEREDOC_END = "GLUCOSE_BOX_FILE_END"
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class BoxSettings:
    """What the box's settings are rendered from: the cloud, and those of
    `render_cloud_init`'s guard settings that are known (the rest take its defaults)."""

    cloud: str
    guard: dict[str, Any]


@dataclass(frozen=True)
class BoxFile:
    path: str
    mode: str
    content: str


def rendered_files(settings: BoxSettings) -> list[BoxFile]:
    """Every file cloud-init installs on such a box (`box.cloud_init.installed_files`)."""
    try:
        files = cloud_init.installed_files(cloud=settings.cloud, **settings.guard)
    except ValueError as error:
        raise Exit(f"the box's settings do not fit: {error}") from None
    return [BoxFile(*file) for file in files]


def version_path() -> str:
    return cloud_init.VERSION_PATH


def running_version(box: Box) -> dict | None:
    """The box's version record, or None when it has none (set up before box versions)."""
    text = _read(box, version_path())
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def current_settings(box: Box) -> dict:
    """The box's own watchdog.json (empty when missing or unreadable)."""
    text = _read(box, cloud_init.CONFIG_PATH)
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def _read(box: Box, path: str) -> str | None:
    result = box.run(f"cat {FS_ROOT}{shlex.quote(path)}", check=False)
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
    types = typing.get_type_hints(cloud_init.render_cloud_init)
    parameters = inspect.signature(cloud_init.render_cloud_init).parameters
    on_box = current_settings(box)
    guard = {}
    for setting, output in cloud_init.GUARD_SETTING_OUTPUTS.items():
        sources = (
            ("--" + setting.replace("_", "-"), overrides.get(setting)),
            (f"{target.source}'s {output}", outputs.get(output)),
            (f"{box.address}'s watchdog.json", on_box.get(setting)),
        )
        found = next(((where, value) for where, value in sources if value is not None), None)
        if found is None:
            if parameters[setting].default is inspect.Parameter.empty:
                raise Exit(
                    f"no {output}: {target.source} has none and {box.address} has no "
                    f"readable watchdog.json; pass --{setting.replace('_', '-')} N"
                )
            continue
        where, value = found
        try:
            guard[setting] = types[setting](value)
        except (TypeError, ValueError):
            raise Exit(
                f"{where} is {value!r}, expected {types[setting].__name__} for {setting}"
            ) from None
    return BoxSettings(target.cloud, guard)


def install_script(files: list[BoxFile], ssh_user: str, cloud: str) -> str:
    """A root bash script writing `files` (version file last), then turning the guard on."""
    version = version_path()
    ordered = sorted(files, key=lambda f: (f.path == version, f.path))
    lines = [
        "set -euo pipefail",
        "begin() {  # begin PATH MODE: the file is written beside, then renamed over the old",
        f'    dest={FS_ROOT}"$1"; mode="$2"',
        '    mkdir -p "$(dirname "$dest")"',
        "}",
        "finish() {",
        '    chmod "$mode" "$dest.glucose-new"',
        '    chown root:root "$dest.glucose-new"',
        '    mv -f "$dest.glucose-new" "$dest"',
        "}",
    ]
    for file in ordered:
        if HEREDOC_END in file.content:
            raise ValueError(f"{file.path} contains {HEREDOC_END}; it cannot be sent as is")
        lines += [
            shlex.join(["begin", file.path, file.mode]),
            f"cat > \"$dest.glucose-new\" <<'{HEREDOC_END}'",
            file.content.rstrip("\n"),
            HEREDOC_END,
            "finish",
        ]
    lines.append(_guard_command(ssh_user, cloud))
    return "\n".join(lines) + "\n"


def _guard_command(ssh_user: str, cloud: str) -> str:
    """setup-box.sh's guard mode, just written: box root, ownership, units."""
    script = FS_ROOT + shlex.quote(f"{cloud_init.PROGRAM_DIR}/setup-box.sh")
    box_root = FS_ROOT + shlex.quote(cloud_init.BOX_ROOT)
    # stdin is this script's own: setup-box.sh must not read the rest of it.
    return f"bash {script} {shlex.quote(ssh_user)} {box_root} {shlex.quote(cloud)} guard </dev/null"


def remote_command(script: str) -> str:
    """One command line carrying `script` (gzip, base64) into a root bash.

    Not on stdin: Fabric feeds a stream one byte per 10 ms, minutes for these files.
    Gzipped, the files are ~13 KB, far under the 128 KiB a single argument may be.
    """
    payload = base64.b64encode(gzip.compress(script.encode(), mtime=0)).decode()
    return f"printf %s {shlex.quote(payload)} | base64 -d | gunzip | {{ {AS_ROOT}; }}"


def update_box(box: Box, files: list[BoxFile]) -> None:
    """Install `files` on `box` as root and turn its guard on."""
    target = box.target
    box.run(remote_command(install_script(files, target.ssh_user, target.cloud)))


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
    # The programs' digest does not depend on the settings: any valid ones will do.
    settings = BoxSettings(target.cloud, {"idle_shutdown_minutes": 30})
    local = _version_of(rendered_files(settings))
    if running.get("programs") != local["programs"]:
        return (
            f"{box.address} runs older (or other) box programs than this checkout "
            "(watchdog, resume unit); run `fab box-update`, no reboot needed"
        )
    return None


def _version_of(files: list[BoxFile]) -> dict:
    version = version_path()
    return json.loads(next(f.content for f in files if f.path == version))


def warn_if_behind(box: Box) -> None:
    """Say so (on stderr) when the box runs other box programs than this checkout."""
    warning = stale_warning(box)
    if warning:
        console.print(f"[yellow]warning:[/] {warning}")
