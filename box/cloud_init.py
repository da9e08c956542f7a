"""The cloud-init document both clouds boot the box with.

It writes the on-box programs from `box/` (idle watchdog, resume
unit, stop recorder, their systemd units and the one-time setup script; without
their comments, see box_files.py) as one bzip2 tar, plus the watchdog's config and
the box version record as plain files; unpacks the programs, then runs the setup
script, which turns the guard on first, installs docker, the NVIDIA container
toolkit and (on AWS) the `aws` CLI only where the image lacks them and writes the
`ready` marker last (or a `failed` marker).

Standard library only and free of pulumi imports, so both Pulumi programs and the
tests call it as a plain function.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import hashlib
import io
import json
import re
import tarfile

from box.box_files import BOX_SOURCE_DIR, installed_text
from box.watchdog_config import WatchdogConfig

BOX_ROOT = "/var/lib/glucose-training"
PROGRAM_DIR = "/opt/glucose-training"
UNIT_DIR = "/etc/systemd/system"
CONFIG_PATH = "/etc/glucose-training/watchdog.json"
# Which box programs and settings a box runs: written by cloud-init and `fab box-update`,
# compared by `fab train` with what this checkout would install.
VERSION_PATH = "/etc/glucose-training/box-version.json"
# The programs, packed; unpacked and removed by the first command of runcmd.
PROGRAMS_ARCHIVE_PATH = f"{PROGRAM_DIR}/box-programs.tar.bz2"
DEFAULT_HUNG_TRAINER_MINUTES = 120
# render_cloud_init's guard settings, and the stack outputs that carry them: `pulumi up`
# exports them (pulumi/__main__.py), `fab box-update` renders running boxes from them.
GUARD_SETTING_OUTPUTS = {
    "idle_shutdown_minutes": "idleShutdownMinutes",
    "hung_trainer_minutes": "hungTrainerMinutes",
    "daily_stop_time": "autoShutdownTime",
    "daily_stop_time_zone": "autoShutdownTimeZone",
}
SSH_USER_PATTERN = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CLOUDS = ("azure", "aws")
# This packer, which runs where `pulumi up` and `fab` run: not installed on the box.
PACKER_FILES = ("__init__.py", "cloud_init.py", "box_files.py")


def render_cloud_init(
    *,
    cloud: str,
    idle_shutdown_minutes: int,
    ssh_user: str,
    hung_trainer_minutes: int = DEFAULT_HUNG_TRAINER_MINUTES,
    daily_stop_time: str = "",
    daily_stop_time_zone: str = "UTC",
) -> str:
    """Return the `#cloud-config` YAML text for one box.

    `daily_stop_time` ("HH:MM" in the IANA `daily_stop_time_zone`) only names the
    cloud's daily stop in the box's stop records. The text is ~20 KB, over AWS's
    16 KB user-data limit: hand the VM
    `encode_user_data(text)` (AWS `user_data_base64`, Azure `osProfile.customData`),
    not the text itself. Raises ValueError naming every bad argument.
    """
    problems = []
    if cloud not in CLOUDS:
        problems.append(f"cloud is {cloud!r}, expected one of {', '.join(CLOUDS)}")
    if not SSH_USER_PATTERN.fullmatch(ssh_user or ""):
        problems.append(f"ssh_user is {ssh_user!r}, expected a Linux user name like 'azureuser'")
    if problems:
        raise ValueError("cloud-init: " + "; ".join(problems))
    files = installed_files(
        cloud=cloud,
        idle_shutdown_minutes=idle_shutdown_minutes,
        hung_trainer_minutes=hung_trainer_minutes,
        daily_stop_time=daily_stop_time,
        daily_stop_time_zone=daily_stop_time_zone,
    )
    programs = [file for file in files if file[0] not in (CONFIG_PATH, VERSION_PATH)]
    packed = base64.b64encode(programs_archive(programs)).decode("ascii")
    lines = [
        "#cloud-config",
        f"# glucose-training box on {cloud}: rendered by box/cloud_init.py.",
        "write_files:",
        f"  - path: {PROGRAMS_ARCHIVE_PATH}",
        "    owner: root:root",
        "    permissions: '0600'",
        "    encoding: b64",
        f"    content: {packed}",
    ]
    for path, mode, content in files:
        if path in (CONFIG_PATH, VERSION_PATH):
            lines += _write_file_entry(path, mode, content)
    unpack = (
        f"/usr/bin/python3 -m tarfile -e {PROGRAMS_ARCHIVE_PATH} / && rm {PROGRAMS_ARCHIVE_PATH}"
    )
    setup = [f"{PROGRAM_DIR}/setup-box.sh", ssh_user, BOX_ROOT, cloud]
    lines += ["runcmd:", f"  - {json.dumps(unpack)}", f"  - {json.dumps(['bash', *setup])}"]
    return "\n".join(lines) + "\n"


def installed_files(
    *,
    cloud: str,
    idle_shutdown_minutes: int,
    hung_trainer_minutes: int = DEFAULT_HUNG_TRAINER_MINUTES,
    daily_stop_time: str = "",
    daily_stop_time_zone: str = "UTC",
) -> list[tuple[str, str, str]]:
    """(path, mode, text) of every file cloud-init installs on a box, the version
    record last: what `fab box-update` writes. ValueError for bad settings."""
    config = WatchdogConfig(
        cloud=cloud,
        idle_shutdown_minutes=idle_shutdown_minutes,
        hung_trainer_minutes=hung_trainer_minutes,
        box_root=BOX_ROOT,
        daily_stop_time=daily_stop_time,
        daily_stop_time_zone=daily_stop_time_zone,
    )
    files = [*_box_files(), (CONFIG_PATH, "0644", config.to_json())]
    return [*files, (VERSION_PATH, "0644", box_version(files))]


def programs_archive(files: list[tuple[str, str, str]]) -> bytes:
    """`files` as a tar (paths relative to /, owned by root), bzip2-compressed.

    Packed together the programs take ~10 % fewer bytes than as YAML blocks in the
    gzipped document (one compression context, no indentation on every line), and
    bzip2 packs this text tighter than xz or gzip. Same bytes on every run: no
    timestamps, and libbz2's output has not changed since 2010.
    """
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for path, mode, content in files:
            data = content.encode("ascii")
            member = tarfile.TarInfo(path.lstrip("/"))
            member.size, member.mode = len(data), int(mode, 8)
            member.uname = member.gname = "root"
            archive.addfile(member, io.BytesIO(data))
    return bz2.compress(tar.getvalue(), compresslevel=9)


def box_guard_settings(config) -> dict:
    """`render_cloud_init`'s guard-rail arguments (GUARD_SETTING_OUTPUTS' keys) from a
    StackConfig (stack/config.py)."""
    return {
        "idle_shutdown_minutes": config.idle_shutdown_minutes,
        "hung_trainer_minutes": config.hung_trainer_minutes,
        "daily_stop_time": config.auto_shutdown_time,
        "daily_stop_time_zone": config.auto_shutdown_time_zone,
    }


def encode_user_data(cloud_init: str) -> str:
    """base64(gzip(text)): what both clouds take as user data / custom data.

    cloud-init un-gzips user data itself (https://cloudinit.readthedocs.io/en/latest/
    explanation/format.html). gzip brings the document under AWS's 16 KB raw limit
    and far under Azure's 64 KB; mtime=0 keeps the bytes the same from run to run.
    Neither cloud applies a changed document to an existing box (cloud-init runs it
    once per instance; on AWS a new user data would also stop and start the instance,
    and Azure cannot change customData in place), so both programs ignore changes on
    existing boxes and `fab box-update` brings new programs and settings to them.
    """
    packed = gzip.compress(cloud_init.encode("ascii"), compresslevel=9, mtime=0)
    return base64.b64encode(packed).decode("ascii")


def box_version(files: list[tuple[str, str, str]]) -> str:
    """The version file's JSON: sha256 of the programs and units, and of the settings."""

    def digest(entries: list[tuple[str, str, str]]) -> str:
        hashed = hashlib.sha256()
        for path, mode, content in sorted(entries):
            hashed.update(f"{path}\0{mode}\0{content}\0".encode())
        return hashed.hexdigest()

    programs = [f for f in files if f[0] != CONFIG_PATH]
    settings = [f for f in files if f[0] == CONFIG_PATH]
    return json.dumps({"programs": digest(programs), "settings": digest(settings)}) + "\n"


def _box_files() -> list[tuple[str, str, str]]:
    """(install path, mode, text) for every file the box needs, sorted for stable output."""
    files = []
    for source in sorted(BOX_SOURCE_DIR.iterdir()):
        if source.name in PACKER_FILES:
            continue
        if source.suffix in (".service", ".timer"):
            files.append((f"{UNIT_DIR}/{source.name}", "0644", installed_text(source)))
        elif source.suffix in (".py", ".sh"):
            text = installed_text(source)
            mode = "0755" if text.startswith("#!") else "0644"
            files.append((f"{PROGRAM_DIR}/{source.name}", mode, text))
    return files


def _write_file_entry(path: str, mode: str, content: str) -> list[str]:
    # A literal block keeps the files readable in the portal / console; it holds any
    # text that is ASCII, ends in exactly one newline and has no leading blank line.
    if not content.isascii() or "\r" in content:
        raise ValueError(f"cloud-init: {path} must be plain ASCII text with Unix newlines")
    if not content.endswith("\n") or content.endswith("\n\n") or content[:1] in (" ", "\n"):
        raise ValueError(f"cloud-init: {path} must end in one newline and start with text")
    body = [f"      {line}" if line else "" for line in content[:-1].split("\n")]
    return [
        f"  - path: {path}",
        "    owner: root:root",
        f"    permissions: '{mode}'",
        "    content: |",
        *body,
    ]
