"""What the trainer prints names a path the user can open: inside a container `fab`
started, the box's folder (on the local target, this machine's), never `/workspace/...`;
and nothing of matplotlib's cache chatter (`generated new fontManager`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from trainer.container_env import HOST_PATHS_VARIABLE, host_path, host_paths_setting

MOUNTS = {"/workspace/runs": "/srv/box/runs", "/workspace/runs/r1": "/data/r1"}


def test_a_path_under_a_mount_is_named_as_the_box_names_it(monkeypatch):
    monkeypatch.setenv(*host_paths_setting(MOUNTS).split("=", 1))
    assert host_path("/workspace/runs/r2/report.md") == "/srv/box/runs/r2/report.md"
    assert host_path("/workspace/runs/r1/report.md") == "/data/r1/report.md"  # the deepest
    assert host_path("/workspace/runs") == "/srv/box/runs"
    assert host_path("/workspace/runs-old/x") == "/workspace/runs-old/x"  # not a mount


def test_outside_a_container_a_path_is_its_own(monkeypatch):
    monkeypatch.delenv(HOST_PATHS_VARIABLE, raising=False)
    assert host_path("/workspace/runs/r1") == "/workspace/runs/r1"
    monkeypatch.setenv(HOST_PATHS_VARIABLE, "{not json")
    assert host_path("/workspace/runs/r1") == "/workspace/runs/r1"


def _trainer(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "GLUCOSE_IMDS_URL": "off", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("synth") / "synth"
    made = _trainer("synth", "--out", str(data), "--cases", "6", "--windows-per-case", "16",
                    env={})  # fmt: skip
    assert made.returncode == 0, made.stderr
    return data


def test_a_fetched_dataset_is_said_cached_in_the_boxs_folder(synth, tmp_path):
    uri = f"file://{tmp_path / 'store'}/datasets/synth"
    assert _trainer("dataset-publish", str(synth), uri, env={}).returncode == 0
    cache = tmp_path / "in-container" / "synth"
    env = {HOST_PATHS_VARIABLE: json.dumps({str(cache): "/home/me/local/box/datasets/synth"})}
    fetched = _trainer("dataset-fetch", uri, str(cache), env=env)
    again = _trainer("dataset-fetch", uri, str(cache), env=env)
    assert "into /home/me/local/box/datasets/synth, sha256 verified" in fetched.stdout
    assert (
        again.stdout.strip() == "dataset synth already cached in /home/me/local/box/datasets/synth"
    )


@pytest.mark.e2e
def test_a_finished_run_names_its_report_where_the_box_keeps_it_and_no_font_cache(synth, tmp_path):
    run_dir = tmp_path / "workspace-runs" / "r1"
    env = {
        HOST_PATHS_VARIABLE: json.dumps({str(run_dir): "/home/me/local/box/runs/r1"}),
        # A new container: HOME=/tmp, no font cache of matplotlib's yet.
        "MPLCONFIGDIR": str(tmp_path / "no-font-cache-yet"),
    }
    done = _trainer(
        "train", "--data", str(synth), "--run-dir", str(run_dir), "--epochs", "1",
        "--batch-size", "8", "--model", "resnet18", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "report in /home/me/local/box/runs/r1/report.md" in said
    assert "fontManager" not in said and "font cache" not in said
