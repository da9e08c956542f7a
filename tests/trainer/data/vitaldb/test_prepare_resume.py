"""A preparation killed with SIGKILL (workers and all) and run again with the same
flags ends with the very bytes of one never interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.__main__ import main
from trainer.data.vitaldb.synthetic_case import Defect, write_case

pytestmark = pytest.mark.e2e  # worker processes killed and started again: ~15 s

CASES = 12
RECORDING_S = 300.0
KILL_WAIT_SECONDS = 120
POLL_SECONDS = 0.005


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> tuple[Path, Path]:
    """(vital dir, labs CSV): enough cases that a kill after the first lands mid-run."""
    directory = tmp_path_factory.mktemp("many-cases")
    rows = ["caseid,dt,name,result"]
    for case in range(1, CASES + 1):
        gap = Defect("gap", 50 + 10 * case, 70 + 10 * case)
        write_case(directory / f"{case}.vital", RECORDING_S, 60 + 2 * case, case, [gap])
        rows += [f"{case},{dt},gluc,{100 + case + dt // 60}" for dt in (0, 150, 300)]
    labs = directory.parent / "labs.csv"
    labs.write_text("\n".join(rows) + "\n")
    return directory, labs


def _args(out: Path, cases: tuple[Path, Path], workers: int) -> list[str]:
    vital_dir, labs = cases
    return ["prepare-vitaldb", "--out", str(out), "--vital-dir", str(vital_dir),
            "--labs", str(labs), "--workers", str(workers)]  # fmt: skip


@pytest.fixture(scope="module")
def killed(cases, tmp_path_factory) -> Path:
    """A preparation SIGKILLed, with its worker processes, once its first case is done."""
    out = tmp_path_factory.mktemp("killed") / "vitaldb"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", *_args(out, cases, workers=2)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the workers die with it
    )
    shards = out / ".prepare" / "shards"
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while not (shards.is_dir() and any(shards.glob("*.json"))):
        assert process.poll() is None and time.monotonic() < deadline, "no case finished"
        time.sleep(POLL_SECONDS)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "meta.json").exists(), "finished before the kill: add cases"
    assert len(list(shards.glob("*.json"))) < CASES
    return out


def test_a_killed_preparation_refuses_to_resume_with_other_flags(killed, cases, capsys):
    assert main([*_args(killed, cases, workers=1), "--label-method", "linear"]) == 2
    assert "other flags (label_method 'nearest' -> 'linear')" in capsys.readouterr().err


def test_a_killed_preparation_resumes_to_the_bytes_of_an_uninterrupted_one(
    killed, cases, tmp_path, capsys
):
    reference = tmp_path / "reference"
    assert main(_args(reference, cases, workers=1)) == 0
    capsys.readouterr()
    assert main(_args(killed, cases, workers=2)) == 0
    assert "resuming: " in capsys.readouterr().err
    assert not (killed / ".prepare").exists()
    names = sorted(path.name for path in reference.iterdir())
    assert sorted(path.name for path in killed.iterdir()) == names
    for name in names:
        assert (killed / name).read_bytes() == (reference / name).read_bytes(), name
