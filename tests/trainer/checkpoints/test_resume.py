"""Resuming from the store: empty run dir, damaged objects, in-process on tiny data."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.conftest import tiny_run_config
from trainer.__main__ import main
from trainer.checkpoints import checkpoint_file, layout
from trainer.loop.train import train
from trainer.storage import open_store

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def no_metadata_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLUCOSE_IMDS_URL", "off")


@pytest.fixture(params=["s3", "az"])
def run_uri(request: pytest.FixtureRequest) -> str:
    base = request.getfixturevalue("s3_uri" if request.param == "s3" else "blob_uri")
    return f"{base}/tiny"


def _config(data: Path, run_dir: Path, uri: str | None, max_steps: int):
    config = tiny_run_config(data, run_dir, max_steps=max_steps)
    return dataclasses.replace(config, checkpoint_uri=uri, checkpoint_every_steps=1)


def _train_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["kind"] == "train"]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return checkpoint_file.load(run_dir / "checkpoints" / "last.pt")["model"]


def test_empty_run_dir_resumes_from_the_store(
    tiny_data: Path, tmp_path: Path, run_uri: str, capsys: pytest.CaptureFixture
):
    run_dir = tmp_path / "run"
    assert train(_config(tiny_data, run_dir, run_uri, max_steps=3)) == 0
    shutil.rmtree(run_dir)  # a new box: nothing local, the data set at another path
    moved_data = shutil.copytree(tiny_data, tmp_path / "elsewhere")
    assert train(_config(moved_data, run_dir, run_uri, max_steps=5)) == 0
    assert _train_steps(run_dir) == [1, 2, 3, 4, 5]  # the history came back from the store
    assert "resume: step 3" in capsys.readouterr().out
    straight = tmp_path / "straight"
    assert train(_config(tiny_data, straight, None, max_steps=5)) == 0
    a, b = _weights(straight), _weights(run_dir)
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_finished_run_leaves_checkpoints_and_run_files_in_the_store(
    tiny_data: Path, tmp_path: Path, run_uri: str
):
    assert train(_config(tiny_data, tmp_path / "run", run_uri, max_steps=3)) == 0
    store = open_store(run_uri)
    keys = set(store.list())
    assert {"summary.json", "status.json", "metrics.jsonl", "report.md"} <= keys
    assert any(key.startswith("tb/") for key in keys)
    assert any(key.startswith("plots/") for key in keys)
    latest = layout.read_pointer(store, layout.LATEST_KEY)
    assert latest == "step-000000003-epoch-0000.pt"
    assert json.loads(store.read_bytes("status.json"))["state"] == "finished"


def test_damaged_newest_object_falls_back_to_the_previous(
    tiny_data: Path,
    tmp_path: Path,
    s3_uri: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
):
    run_dir, uri = tmp_path / "run", f"{s3_uri}/tiny"
    assert train(_config(tiny_data, run_dir, uri, max_steps=3)) == 0
    store = open_store(uri)
    newest = layout.checkpoint_key("step-000000003-epoch-0000.pt")
    store.write_bytes(newest, store.read_bytes(newest)[:1000])
    shutil.rmtree(run_dir)
    with caplog.at_level(logging.WARNING):
        assert train(_config(tiny_data, run_dir, uri, max_steps=3)) == 0
    assert "does not match its record" in caplog.text
    assert "resume: step 2," in capsys.readouterr().out
    assert _train_steps(run_dir) == [1, 2, 3]


def test_resume_with_another_dataset_is_refused_with_exit_2(
    tiny_data: Path, tmp_path: Path, s3_uri: str, capsys: pytest.CaptureFixture
):
    uri = f"{s3_uri}/tiny"
    assert train(_config(tiny_data, tmp_path / "run", uri, max_steps=2)) == 0
    other = tmp_path / "other-data"
    shutil.copytree(tiny_data, other)
    glucose = other / "glucose.npy"
    np.save(glucose, np.load(glucose) + 1)
    argv = ["train", "--data", str(other), "--run-dir", str(tmp_path / "fresh")]
    argv += ["--model", "resnet18", "--batch-size", "32", "--checkpoint-uri", uri]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: resume: the dataset differs")
