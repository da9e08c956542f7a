"""`fab train`'s launch record (launch.json) on the box and in storage: a resume keeps the
first launch's, as box/contract.py's LaunchRecord reads it (the box's file is the box's
to write), with this start's deadline, flags and image. The box is the tests' sshd."""

from __future__ import annotations

import json

from ops.remote.boxes import box_for
from ops.run.container import Launch
from ops.run.launch import write_launch_record
from ops.target.resolve import load_target_file
from trainer.storage import open_store

FIRST = (
    '{"run_id": "r1", "started_at": 1700000000.0, "name": "first", "dataset": "synth", '
    '"hourly_price_usd": NaN, "spot": "yes", "boxes": 1e400, "evil": {"deep": [1]}}'
)
"""What the first launch left, then something on the box rewrote: what its record reads
(the start, the name, the dataset) is kept, the rest is this start's or left out."""


def test_a_resume_keeps_the_first_launch_record_as_its_record_reads_it(local_box, monkeypatch):
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    box = box_for(load_target_file(local_box.target_file))
    run_dir = local_box.root / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "launch.json").write_text(FIRST)
    launch = Launch("r1", "img:2", "synth", ("--epochs", "3"), deadline=1.8e9)
    try:
        write_launch_record(box, launch)
    finally:
        box.close()
    storage = open_store(f"file://{local_box.root.parent / 'storage'}")
    for text in ((run_dir / "launch.json").read_text(), storage.read_bytes("runs/r1/launch.json")):
        written = json.loads(text)
        assert (written["started_at"], written["name"], written["dataset"]) == (
            1700000000.0, "first", "synth"
        )  # fmt: skip
        # Not numbers, nor true or false: this start's.
        assert (written["hourly_price_usd"], written["spot"], written["boxes"]) == (1.5, False, 1)
        assert "evil" not in written
        assert (written["deadline"], written["image"]) == (1.8e9, "img:2")
        assert written["trainer_args"] == ["--epochs", "3"]
