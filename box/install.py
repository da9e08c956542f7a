#!/usr/bin/env python3
"""Install one build of the box programs and its settings as a whole, or change nothing.

usage (as root, beside the archive's `box/`): python3 -m box.install ARCHIVE SETTINGS

ARCHIVE is the programs' tar (stack/box_packing.py: the package `box/`, plain files), SETTINGS the
watchdog.json to run them with. The first boot (bootstrap.py) and `fab box-update`
both install this way:

1. refuse, before touching anything, when the python3 running it is older than the
   programs need (MIN_PYTHON, box/__init__.py), or the file system lacks the room for the
   release and its copies (a box-update on a nearly full disk must not leave half a
   set behind);
2. unpack into PROGRAM_DIR/releases/<programs' sha256>-<settings' sha256> (each cut
   to 16), beside the running set, with the settings and the version record
   (box.contract.VERSION_PATH's content);
3. check that the new set starts: its programs import and its watchdog reads its
   settings; else remove it and change nothing;
4. switch PROGRAM_DIR/current to it with one rename, and point
   /etc/glucose-training/watchdog.json and box-version.json into it (settings and
   programs always change together: an old watchdog never meets new keys);
5. copy the systemd units that changed, keep the previous release (to go back to by
   hand), remove older ones.

Then `setup-box.sh` (from the new set) turns the guard on. $GLUCOSE_BOX_FS_ROOT puts
everything under another root (the tests' boxes). Standard library only, Python 3.10+.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from box import MIN_PYTHON

# Before anything else of ours: the contract's records use `X | None`, which an older
# python3 cannot import, and the units run the programs with this same python3.
if sys.version_info < MIN_PYTHON:
    sys.exit(
        f"{sys.executable} is Python {'.'.join(map(str, sys.version_info[:3]))}, the box "
        f"programs need {'.'.join(map(str, MIN_PYTHON))} or later (Ubuntu 22.04's); nothing "
        "was changed: boot the box from an image the stack names"
    )

from box import contract

UNIT_SUFFIXES = (".service", ".timer")
RELEASES = "releases"
# Room for the unpacked set, its staging copy and the old one's files, plus slack for
# the settings, the version record and the units.
ROOM_FACTOR = 3
ROOM_SLACK_BYTES = 1024 * 1024
CHECK_TIMEOUT_SECONDS = 60
# What the new set must do to count as started: import every program, read its settings.
PACKAGE = "box"
"""The archive's one folder: the units run its programs as `python3 -m box.<program>` from
the release."""
START_CHECK = (
    "from box import busy_signals, resume, stop_records, watchdog, watchdog_config; "
    "watchdog_config.load_config()"
)


class InstallError(Exception):
    """Nothing was changed; the message says why and what to do."""


def install(archive: bytes, settings: str, root: Path) -> Path:
    """Install `archive` with `settings` under `root`; the release directory now current."""
    version = {
        "programs": hashlib.sha256(archive).hexdigest(),
        "settings": hashlib.sha256(settings.encode()).hexdigest(),
    }
    program_dir = root / contract.PROGRAM_DIR.lstrip("/")
    release = program_dir / RELEASES / f"{version['programs'][:16]}-{version['settings'][:16]}"
    _check_room(program_dir, len(archive) + len(settings))
    if not release.is_dir():
        _unpack(archive, settings, version, release)
    _check_starts(release)
    _switch(program_dir, release)
    _link_settings(root, program_dir)
    _copy_units(root, release)
    _prune(program_dir, release)
    return release


def _check_room(program_dir: Path, size: int) -> None:
    program_dir.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(program_dir)
    need = ROOM_FACTOR * size + ROOM_SLACK_BYTES
    if usage.free < need:
        raise InstallError(
            f"{program_dir} has {usage.free // 1024} KB free, the box programs need "
            f"{need // 1024} KB; nothing was changed: free some space on the box "
            "(`docker system prune`, old runs' checkpoints), then update again"
        )


def _unpack(archive: bytes, settings: str, version: dict, release: Path) -> None:
    staging = release.with_name(f".{release.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / PACKAGE).mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar.getmembers():
            folder, _, name = member.name.rpartition("/")
            if not member.isfile() or folder != PACKAGE or "/" in name or name.startswith("."):
                raise InstallError(f"the archive holds {member.name!r}, not a plain box file")
            data = tar.extractfile(member).read()
            _write(staging / member.name, data, member.mode & 0o755)
    # Root's alone: the settings may hold a secret (the webhook URL).
    _write(staging / Path(contract.WATCHDOG_CONFIG_PATH).name, settings.encode(), 0o600)
    record = json.dumps(version) + "\n"
    _write(staging / Path(contract.VERSION_PATH).name, record.encode(), 0o644)
    os.replace(staging, release)


def _write(path: Path, data: bytes, mode: int) -> None:
    # Created its owner's alone, then given `mode`: a secret is never readable on the way.
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, mode)


def _check_starts(release: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GLUCOSE_WATCHDOG_CONFIG": str(release / Path(contract.WATCHDOG_CONFIG_PATH).name),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-S", "-c", START_CHECK],
        cwd=release,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(release, ignore_errors=True)
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(f"the new box programs do not start ({tail}); the box keeps its own")


def _switch(program_dir: Path, release: Path) -> None:
    link = program_dir / contract.CURRENT
    partial = program_dir / f".{contract.CURRENT}.new"
    if partial.is_symlink() or partial.exists():
        partial.unlink()
    os.symlink(f"{RELEASES}/{release.name}", partial)
    os.replace(partial, link)


def _link_settings(root: Path, program_dir: Path) -> None:
    """The fixed paths the units and `fab` read, as links into the current set."""
    for path in (contract.WATCHDOG_CONFIG_PATH, contract.VERSION_PATH):
        fixed = root / path.lstrip("/")
        fixed.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(program_dir / contract.CURRENT / fixed.name, fixed.parent)
        if fixed.is_symlink() and os.readlink(fixed) == target:
            continue
        partial = fixed.with_name(f".{fixed.name}.new")
        if partial.is_symlink() or partial.exists():
            partial.unlink()
        os.symlink(target, partial)
        os.replace(partial, fixed)


def _copy_units(root: Path, release: Path) -> None:
    unit_dir = root / contract.UNIT_DIR.lstrip("/")
    unit_dir.mkdir(parents=True, exist_ok=True)
    for unit in sorted((release / PACKAGE).iterdir()):
        if unit.suffix not in UNIT_SUFFIXES:
            continue
        installed = unit_dir / unit.name
        if installed.is_file() and installed.read_bytes() == unit.read_bytes():
            continue
        partial = unit_dir / f".{unit.name}.new"
        _write(partial, unit.read_bytes(), 0o644)
        os.replace(partial, installed)


def _prune(program_dir: Path, release: Path) -> None:
    """Keep the new set and the newest other one; the flat copies of its programs on
    boxes set up before releases existed go too (the bootstrap stays)."""
    releases = program_dir / RELEASES
    others = sorted(
        (path for path in releases.iterdir() if path != release and not path.name.startswith(".")),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for old in others[1:]:
        shutil.rmtree(old, ignore_errors=True)
    for name in os.listdir(release / PACKAGE):
        flat = program_dir / name
        if flat.is_file() and not flat.is_symlink():
            flat.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m box.install ARCHIVE SETTINGS", file=sys.stderr)
        return 2
    root = Path(os.environ.get("GLUCOSE_BOX_FS_ROOT") or "/")
    try:
        archive, settings = Path(argv[0]).read_bytes(), Path(argv[1]).read_text()
        release = install(archive, settings, root)
    except (InstallError, OSError, tarfile.TarError) as error:
        print(f"glucose-install: ERROR: {error}", file=sys.stderr)
        return 1
    print(f"glucose-install: box programs and settings {release.name} installed and current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
