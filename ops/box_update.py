"""Box programs and settings to running boxes, without a reboot; and whether a box is behind.

cloud-init installs `pulumi/infra/box/*`, their systemd units and the watchdog's
settings once, at a box's first boot, and `pulumi up` deliberately leaves existing
boxes alone. `fab box-update` renders the very same files (`infra.cloud_init`, with the
stack's settings), writes them over SSH as root (each to a temporary name, then
renamed; the version file last), reloads systemd and restarts the timers. Services are
re-enabled, never started: the resume unit acts only at boot.

`/etc/glucose-training/box-version.json` records what a box runs; `fab train` compares
it with this checkout and says when the box is behind.

On the box, every path is prefixed with `$GLUCOSE_BOX_FS_ROOT` and `systemctl` is
`$GLUCOSE_SYSTEMCTL` when they are set: only the tests set them, through their sshd, to
install into a temporary tree and record what systemd would have been asked.
"""

from __future__ import annotations

import base64
import gzip
import json
import shlex
from dataclasses import dataclass

from invoke.exceptions import Exit
from rich.console import Console

from ops.pulumi_program import infra_module
from ops.remote import Box, nodes
from ops.target import Target

CLOUDS = ("aws", "azure")
UNIT_SUFFIXES = (".service", ".timer")
FS_ROOT = '"${GLUCOSE_BOX_FS_ROOT:-}"'
SYSTEMCTL = '"${GLUCOSE_SYSTEMCTL:-systemctl}"'
# Run as root without a password prompt (both clouds' default users may sudo).
AS_ROOT = 'if [ "$(id -u)" -eq 0 ]; then bash -s; else sudo -n bash -s; fi'
HEREDOC_END = "GLUCOSE_BOX_FILE_END"
console = Console(stderr=True, soft_wrap=True)


@dataclass(frozen=True)
class BoxSettings:
    """What the box's settings are rendered from (the stack's, or the box's own)."""

    cloud: str
    idle_shutdown_minutes: int
    hung_trainer_minutes: int


@dataclass(frozen=True)
class BoxFile:
    path: str
    mode: str
    content: str


def rendered_files(settings: BoxSettings, ssh_user: str) -> list[BoxFile]:
    """Every file cloud-init writes on such a box, as `infra.cloud_init` renders it."""
    import yaml

    cloud_init = infra_module("cloud_init")
    document = yaml.safe_load(
        cloud_init.render_cloud_init(
            cloud=settings.cloud,
            idle_shutdown_minutes=settings.idle_shutdown_minutes,
            ssh_user=ssh_user,
            hung_trainer_minutes=settings.hung_trainer_minutes,
        )
    )
    return [BoxFile(f["path"], f["permissions"], f["content"]) for f in document["write_files"]]


def version_path() -> str:
    return infra_module("cloud_init").VERSION_PATH


def running_version(box: Box) -> dict | None:
    """The box's version record, or None when it has none (set up before box versions)."""
    text = _read(box, version_path())
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def current_settings(box: Box) -> dict:
    """The box's own watchdog.json (empty when missing or unreadable)."""
    text = _read(box, infra_module("cloud_init").CONFIG_PATH)
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def _read(box: Box, path: str) -> str | None:
    result = box.run(f"cat {FS_ROOT}{shlex.quote(path)}", check=False)
    return result.stdout if result.exited == 0 else None


def settings_for(target: Target, idle_shutdown_minutes: int | None, box: Box) -> BoxSettings:
    """The stack's settings where it has them, else what the box runs now."""
    if target.cloud not in CLOUDS:
        raise Exit(
            f"{target.source} is cloud {target.cloud!r}: box-update is for boxes `pulumi up` "
            f"made ({' or '.join(CLOUDS)}), whose programs cloud-init installed"
        )
    current = current_settings(box)
    idle = idle_shutdown_minutes or current.get("idle_shutdown_minutes")
    if not idle:
        raise Exit(
            f"no idleShutdownMinutes: {target.source} has none and {box.address} has no "
            "readable watchdog.json; pass --idle-shutdown-minutes N"
        )
    hung = (
        current.get("hung_trainer_minutes")
        or infra_module("cloud_init").DEFAULT_HUNG_TRAINER_MINUTES
    )
    return BoxSettings(target.cloud, int(idle), int(hung))


def install_script(files: list[BoxFile]) -> str:
    """A root bash script writing `files` (version file last), then reloading systemd."""
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
    lines += [f"{SYSTEMCTL} daemon-reload", *_unit_commands(files)]
    return "\n".join(lines) + "\n"


def remote_command(script: str) -> str:
    """One command line carrying `script` (gzip, base64) into a root bash.

    Not on stdin: Fabric feeds a stream one byte per 10 ms, minutes for these files.
    Gzipped, the files are ~13 KB, far under the 128 KiB a single argument may be.
    """
    payload = base64.b64encode(gzip.compress(script.encode(), mtime=0)).decode()
    return f"printf %s {shlex.quote(payload)} | base64 -d | gunzip | {{ {AS_ROOT}; }}"


def _unit_commands(files: list[BoxFile]) -> list[str]:
    units = sorted(f.path.rsplit("/", 1)[1] for f in files if f.path.endswith(UNIT_SUFFIXES))
    timers = [u for u in units if u.endswith(".timer")]
    timed = {t.removesuffix(".timer") + ".service" for t in timers}
    services = [u for u in units if u.endswith(".service") and u not in timed]
    commands = []
    if services:
        commands.append(f"{SYSTEMCTL} {shlex.join(['enable', *services])}")
    if timers:
        commands.append(f"{SYSTEMCTL} {shlex.join(['enable', *timers])}")
        commands.append(f"{SYSTEMCTL} {shlex.join(['restart', *timers])}")
    return commands


def update_box(box: Box, files: list[BoxFile]) -> None:
    """Install `files` on `box` as root and restart its timers."""
    box.run(remote_command(install_script(files)))


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
    current = current_settings(box)
    settings = BoxSettings(
        target.cloud,
        int(current.get("idle_shutdown_minutes") or 30),
        int(current.get("hung_trainer_minutes") or 120),
    )
    local = _version_of(rendered_files(settings, target.ssh_user))
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
