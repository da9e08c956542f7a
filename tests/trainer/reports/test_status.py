import dataclasses
import json
import time
from pathlib import Path

from box.contract import STATUS_KEYS
from tests.trainer.conftest import tiny_run_config
from trainer.checkpoints.sync import RunSync, SyncConfig
from trainer.loop.train import train
from trainer.reports.status import StatusWriter
from trainer.storage import open_store

FAILING_WAIT_SECONDS = 30


def test_status_json_has_every_contract_key_after_each_write(tmp_path):
    writer = StatusWriter(tmp_path, "run-1", total_steps=10)
    writer.write(step=3, train_loss=0.5)
    status = json.loads((tmp_path / "status.json").read_text())
    assert set(status) == set(STATUS_KEYS)
    assert (status["run_id"], status["state"], status["step"]) == ("run-1", "running", 3)
    assert status["updated_at"] > 0


def test_status_json_shows_since_when_uploads_fail(tmp_path):
    unwritable = tmp_path / "store"
    unwritable.write_text("a file where the store's directory should be")
    run_dir = tmp_path / "run"
    checkpoint = run_dir / "checkpoints" / "step-000000001.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    fast_retry = SyncConfig(retry_initial_seconds=0.05, retry_max_seconds=0.1)
    sync = RunSync(open_store(f"file://{unwritable}"), run_dir, fast_retry).start()
    writer = StatusWriter(run_dir, "run-1", total_steps=10, uploads=sync.uploads)
    before = time.time()
    sync.publish_checkpoint(checkpoint, "0" * 64)
    deadline = time.monotonic() + FAILING_WAIT_SECONDS
    while sync.status.failing_since is None and time.monotonic() < deadline:
        time.sleep(0.05)
    writer.write(step=1)
    sync.close(0.5)
    uploads = json.loads((run_dir / "status.json").read_text())["uploads"]
    assert uploads["pending"] == 1 and uploads["last_uploaded_at"] is None
    assert before <= uploads["failing_since"] <= time.time()


def test_status_json_of_a_run_with_a_store_shows_working_uploads(tiny_data, tmp_path):
    config = tiny_run_config(tiny_data, tmp_path / "run", max_steps=2)
    store_dir = tmp_path / "store"
    config = dataclasses.replace(config, checkpoint_uri=f"file://{store_dir}")
    assert train(config) == 0
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "finished"
    assert set(status["uploads"]) == {"pending", "failing_since", "last_uploaded_at"}
    assert status["uploads"]["failing_since"] is None


def test_status_json_of_a_run_without_a_store_has_no_uploads(trained_run):
    assert json.loads((trained_run / "status.json").read_text())["uploads"] is None


def test_each_process_that_trains_a_run_adds_its_span_and_pays_only_for_those(
    tiny_data, tmp_path, monkeypatch
):
    records = tmp_path / "box-records"  # the box's boot record: up since an hour ago
    records.mkdir()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (records / "boots.jsonl").write_text(json.dumps({"at": time.time() - 3600, "boot_id": boot_id}))
    monkeypatch.setenv("GLUCOSE_BOX_RECORDS", str(records))
    run_dir = tmp_path / "run"
    config = dataclasses.replace(
        tiny_run_config(tiny_data, run_dir, max_steps=2), checkpoint_uri=f"file://{tmp_path}/s"
    )
    (run_dir).mkdir()
    (run_dir / "launch.json").write_text(
        json.dumps({"started_at": time.time(), "hourly_price_usd": 3600.0})
    )
    assert train(config) == 0
    time.sleep(3)  # the run waits: the box bills, but for another run
    more = dataclasses.replace(config, train=dataclasses.replace(config.train, max_steps=4))
    assert train(more) == 0
    ran = json.loads((run_dir / "status.json").read_text())["ran"]
    assert len(ran) == 2 and ran[0][0] <= ran[0][1] < ran[1][0] - 3 <= ran[1][1]
    spent = json.loads((run_dir / "summary.json").read_text())["cost"]["box_hours"][0] * 3600
    assert spent <= sum(end - start for start, end in ran) + 0.5
