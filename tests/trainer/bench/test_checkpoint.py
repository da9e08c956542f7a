"""`python -m trainer bench-checkpoint` against the S3 and Blob emulators."""

from __future__ import annotations

import json

import pytest

from trainer.__main__ import main
from trainer.bench.checkpoint import CHECKPOINT_BUDGET_SECONDS, REQUIRED_THROUGHPUT_RATIO

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["s3", "az"])
def remote_uri(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GLUCOSE_IMDS_URL", "off")
    return request.getfixturevalue("s3_uri" if request.param == "s3" else "blob_uri")


def _bench(capsys: pytest.CaptureFixture, *argv: str) -> dict:
    assert main(["bench-checkpoint", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_resnet34_checkpoint_saves_and_uploads_within_the_spot_budget(
    remote_uri: str, capsys: pytest.CaptureFixture
) -> None:
    result = _bench(capsys, "--uri", f"{remote_uri}/bench", "--upload-only", "--repeats", "2")
    assert result["state_mb"] > 80  # the whole ResNet34-1D state, AdamW moments included
    assert result["save_and_upload_max_s"] < CHECKPOINT_BUDGET_SECONDS
    # Each checkpoint's CPU (save + upload threads), charged against one 30 s interval.
    assert result["cpu_accounted_ratio"] >= REQUIRED_THROUGHPUT_RATIO


def test_overhead_rounds_alternate_and_save_on_the_timer(
    s3_uri: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLUCOSE_IMDS_URL", "off")
    argv = ["--uri", f"{s3_uri}/overhead", "--repeats", "1", "--batch-size", "16"]
    argv += ["--rounds", "2", "--round-seconds", "4", "--every", "2"]
    result = _bench(capsys, *argv)
    assert len(result["pair_ratios"]) == 1
    assert result["checkpoints_saved"] >= 2  # one at the round's start, then the timer
    assert result["windows_per_s_with"] > 0 and result["windows_per_s_without"] > 0
