#!/usr/bin/env python3
"""When the box came up: one JSON line per boot in BOX_ROOT/watchdog/boots.jsonl.

Run at every boot (the glucose-stop-record unit's ExecStart; its ExecStop records the
shutdown). With stops.jsonl it says when the box was up, which is when it billed: `fab
status` and the trainer's summary count a run's dollars from them
(trainer.reports.cost). The boot time is the kernel's (`btime`), so a unit that starts
late still records the boot itself. The record carries the size, zone and market the
box booted on, from its cloud's instance metadata (`fab start` may have resized it, a
fallback may have taken another size than vmSize): each boot is priced at its own size.
A boot on anything but the stack's first choice (`first_choice`) is told to the stack's
channels (box/notify.py), once. A record that cannot be written (a full disk) is logged
and skipped; metadata that does not answer leaves the size out. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

from box import contract, instance_metadata, notify
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
        **placement(config),
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
    tell_a_fallback(config, record)
    return 0


def placement(config: WatchdogConfig) -> dict[str, str]:
    """The boot record's size, zone and market; {} when the metadata does not answer."""
    try:
        found = instance_metadata.placement(config)
    except instance_metadata.MetadataError as error:
        log(f"WARNING: no size recorded for this boot (its dollars take the launch price): {error}")
        return {}
    keys = (contract.RECORD_SIZE, contract.RECORD_ZONE, contract.RECORD_MARKET)
    return {key: found[name] for key, name in zip(keys, ("size", "zone", "market"), strict=True)}


def tell_a_fallback(config: WatchdogConfig, record: dict) -> None:
    """Tell the stack's channels when this boot is not on its first choice."""
    size, market = record.get(contract.RECORD_SIZE), record.get(contract.RECORD_MARKET)
    if not (config.first_choice and size) or f"{size} {market}" == config.first_choice:
        return
    where = " ".join(str(part) for part in (size, record.get(contract.RECORD_ZONE), market) if part)
    text = (
        f"A glucose-training box booted on {where}, not the stack's first choice "
        f"{config.first_choice}: its dollars follow that size (`fab status` shows the price)."
    )
    notify.notify_once(config, f"boot:{record[contract.RECORD_BOOT_ID]}", text, log)


if __name__ == "__main__":
    sys.exit(main())
