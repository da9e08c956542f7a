import json

from trainer.status import STATUS_KEYS, StatusWriter


def test_status_json_has_every_contract_key_after_each_write(tmp_path):
    writer = StatusWriter(tmp_path, "run-1", total_steps=10)
    writer.write(step=3, train_loss=0.5)
    status = json.loads((tmp_path / "status.json").read_text())
    assert set(status) == set(STATUS_KEYS)
    assert (status["run_id"], status["state"], status["step"]) == ("run-1", "running", 3)
    assert status["updated_at"] > 0
