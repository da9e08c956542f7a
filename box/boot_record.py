#!/usr/bin/env python3
"""When the box came up: one JSON line per boot in BOX_ROOT/watchdog/boots.jsonl.

Run at every boot (the glucose-stop-record unit's ExecStart; its ExecStop records the
shutdown). With stops.jsonl it says when the box was up, which is when it billed: `fab
status` and the trainer's summary count a run's dollars from them
(trainer.reports.cost). The boot time is the kernel's (`btime`), so a unit that starts
late still records the boot itself. A record that cannot be written (a full disk) is
logged and skipped. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

from box import contract
from box.box_time import boot_time, now_seconds, read_boot_id
from box.watchdog_config import WatchdogConfig, load_config_or_say_why

TAIL_BYTES = 4096


def log(message: str) -> None:
    print(f"glucose-boot-record: {message}", flush=True)


def recorded(config: WatchdogConfig, boot_id: str) -> bool:
    """Whether this boot is on record already (the unit restarted within one boot)."""
    try:
        with open(config.boots_path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - TAIL_BYTES))
            lines = handle.read(TAIL_BYTES).decode(errors="replace").splitlines()
    except OSError:
        return False
    return any(f'"{contract.RECORD_BOOT_ID}": {json.dumps(boot_id)}' in line for line in lines)


def main() -> int:
    config = load_config_or_say_why("glucose-boot-record")
    if config is None:
        return 2
    boot_id = read_boot_id(config.boot_id_path)
    if recorded(config, boot_id):
        return 0
    record = {
        contract.RECORD_AT: boot_time(config.proc_root) or now_seconds(),
        contract.RECORD_BOOT_ID: boot_id,
    }
    try:
        config.boots_path.parent.mkdir(parents=True, exist_ok=True)
        with open(config.boots_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        log(f"WARNING: boot not recorded in {config.boots_path}: {error}")
        return 0
    log(f"recorded the boot at {record[contract.RECORD_AT]:.0f} ({contract.BOOTS_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
