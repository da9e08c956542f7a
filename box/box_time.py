"""The clock and the boot, as the box programs see them (tests replace both).

$GLUCOSE_WATCHDOG_NOW (unix seconds) replaces the clock; the boot id and the boot
time come from files under the configured paths (a fake /proc in tests).
Standard library only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CLOCK_ENV = "GLUCOSE_WATCHDOG_NOW"


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
