"""A sweep's end, told by the box: the real driver writes the sweep's status.json, the
real resume unit reads it and tells a real webhook on 127.0.0.1."""

from __future__ import annotations

from tests.fakes.fake_box import FakeBox
from trainer.sweep.driver import Driver, distributions, open_study
from trainer.sweep.space import parse_params
from trainer.sweep.spec import SweepSpec

T0 = 1_800_000_000.0
PARAMS = ["lr=0.001,0.003,0.01"]


def test_a_finished_sweep_is_told_with_its_best_trials_validation_mae(tmp_path, webhook):
    box = FakeBox(tmp_path / "box", docker_wait_seconds=1, notify_webhook=webhook.server.endpoint)
    sweep_dir = box.box_root / "sweeps" / "sweep-m"
    spec = SweepSpec(
        sweep_id="sweep-m", dataset="tiny", data_dir="/d", runs_dir=str(box.box_root / "runs"),
        storage_uri=f"file://{tmp_path / 'storage'}", params=PARAMS, method="grid", trials=3,
    )  # fmt: skip
    box.add_sweep("sweep-m", created_at=T0 - 3600, running=False, exit_code=0, finished_at=T0 - 30)
    study = open_study(spec, parse_params(PARAMS), sweep_dir)
    for mae in (14.5, 12.25, 13.0):  # three complete trials
        study.tell(study.ask(distributions(parse_params(PARAMS))), mae)
    Driver(spec, sweep_dir).write_status("finished", 0)
    done = box.run("resume.py", now=T0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert webhook.texts == ["sweep sweep-m finished: best val MAE 12.25"]
