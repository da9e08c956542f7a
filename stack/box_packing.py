"""The box programs as one archive, built where `pulumi up` and `fab box-update` run.

The archive holds the package box/ (every program, script and systemd unit in it) but
the first-boot files (which travel in the user data): a plain ustar tar whose names are
`box/<file>`, root-owned, dated 1970, ASCII only. The same source gives the same
bytes on every machine and every run, so its sha256 names one build: a new box's user
data pins it (box/bootstrap.py checks it), `fab box-update` sends it, and
box-version.json on a box says which one it runs. Kept as text rather than
compressed, so both clouds' Pulumi providers take it as a string (azure-native's Blob
takes bytes only from a file); it is ~100 KB in the stack's storage.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import box
from box import bootstrap
from box.watchdog_config import WatchdogConfig, guard_problems

BOX_DIR = Path(box.__file__).resolve().parent
PACKAGE = BOX_DIR.name
"""The archive's one folder: the box runs `python3 -m box.<program>` beside it."""
INSTALLER = bootstrap.INSTALLER
"""The archive's members `python3 -m box.install` runs from before the set is installed."""
SHIPPED_SUFFIXES = (".py", ".sh", ".service", ".timer")
FIRST_BOOT_FILES = ("bootstrap.py", "glucose-bootstrap.service")
"""In the user data (stack/cloud_init.py): what fetches the archive cannot be in it."""
ALSO_IN_THE_ARCHIVE = ("bootstrap.py",)
"""First-boot files the programs import too: box/notify.py signs with its SigV4."""


@dataclass(frozen=True)
class Programs:
    """One build of the box programs."""

    archive: bytes
    sha256: str

    @property
    def text(self) -> str:
        """The archive as the string the providers take (it is ASCII)."""
        return self.archive.decode("ascii")


def shipped_sources() -> list[Path]:
    """The files of box/ that the archive holds, sorted."""
    return sorted(
        path
        for path in BOX_DIR.iterdir()
        if path.suffix in SHIPPED_SUFFIXES
        and (path.name not in FIRST_BOOT_FILES or path.name in ALSO_IN_THE_ARCHIVE)
    )


def build_programs() -> Programs:
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for source in shipped_sources():
            data = source.read_bytes()
            if not data.isascii() or b"\r" in data:
                raise ValueError(f"{source} must be plain ASCII text with Unix newlines")
            member = tarfile.TarInfo(f"{PACKAGE}/{source.name}")
            member.size = len(data)
            member.mode = 0o755 if data.startswith(b"#!") else 0o644
            member.uname = member.gname = "root"
            archive.addfile(member, io.BytesIO(data))
    data = tar.getvalue()
    return Programs(data, hashlib.sha256(data).hexdigest())


def settings_text(
    cloud: str, notify: dict | None = None, storage: dict | None = None, **guard: object
) -> str:
    """watchdog.json for a box of `cloud` with these guard settings (GUARD_SETTINGS' box
    keys; left out: the programs' defaults), where it tells a run's end (`notify`:
    stack.outputs.NOTIFY_OUTPUTS' box keys) and where it stores a failed one's
    (`storage`: stack.cloud_init.box_storage_settings). ValueError naming every bad
    one, so a bad setting fails at `pulumi preview` or in `fab box-update`, not on a
    booting box; a setting out of its range (GuardSetting.limits, the stack's) is
    refused here too."""
    problems = guard_problems(guard)
    if problems:
        raise ValueError("; ".join(problems))
    return WatchdogConfig(cloud=cloud, **(notify or {}), **(storage or {}), **guard).to_json()
