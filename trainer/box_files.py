"""Names of the box's own files that the trainer meets: its copies of box/contract.py's.

The image carries trainer/ alone, so these are copies; tests/box/test_contract.py proves
them equal to the box's.
"""

STOP_MARKER = "STOPPED_BY_USER"
"""In a run dir, written by `fab stop`: never mirrored (restored on another box it would
block the resume), never restored."""
LAUNCH_RECORD = "launch.json"
"""In a run dir, written by `fab train`: the first start, the price, the boxes; never
restored from the store."""
BOOTS_FILE = "boots.jsonl"
STOPS_FILE = "stops.jsonl"
"""The box's records of its boots and stops (BOX_ROOT/watchdog), which the trainer
container sees read-only: when the box billed."""
RECORD_AT, RECORD_BOOT_ID = "at", "boot_id"
"""Keys of each of those records: when (unix s), in which boot."""
RECORD_SIZE, RECORD_MARKET = "size", "market"
"""Keys of a boot record too: the size and market the box booted on (its price)."""
