"""The clock and the boot, as the box programs see them (tests replace both).

$GLUCOSE_WATCHDOG_NOW (unix seconds) replaces the wall clock, $GLUCOSE_WATCHDOG_UPTIME
(seconds) the boot's own; the boot id and the boot time come from files under the
configured paths (a fake /proc in tests). Standard library only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CLOCK_ENV = "GLUCOSE_WATCHDOG_NOW"
UPTIME_ENV = "GLUCOSE_WATCHDOG_UPTIME"


def now_seconds() -> float:
    fake = os.environ.get(CLOCK_ENV)
    return float(fake) if fake else time.time()


def read_boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unknown"


def boot_time(proc_root: str) -> float | None:
    """Unix seconds the kernel booted (`btime` in /proc/stat), or None when unknown."""
    try:
        for line in (Path(proc_root) / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def uptime_seconds(proc_root: str) -> float | None:
    """Seconds since the boot, or None when unknown.

    The kernel's CLOCK_BOOTTIME (`/proc/uptime`): it never steps as the wall clock may,
    and it counts a suspend. A test that replaces the wall clock ($GLUCOSE_WATCHDOG_NOW)
    replaces this one too ($GLUCOSE_WATCHDOG_UPTIME) or goes without: the real uptime
    beside a made-up wall clock would look like a clock step at every look.
    """
    if os.environ.get(CLOCK_ENV):
        fake = os.environ.get(UPTIME_ENV)
        return float(fake) if fake else None
    try:
        return float((Path(proc_root) / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
