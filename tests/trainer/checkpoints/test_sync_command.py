"""`python -m trainer sync` against real stores (a directory, moto S3, Azurite) and a
real trainer: it uploads only a run dir to that run's own store, and one uploader at a
time works on a run dir."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from box.contract import EXIT_STOPPED, EXIT_USER_ERROR
from tests.fixtures.s3 import S3Emulator
from tests.trainer.conftest import tiny_run_config
from tests.trainer.trainer_process import (
    start_process,
    start_training,
    wait_for_exit,
    wait_for_step,
)
from trainer.__main__ import main
from trainer.checkpoints import layout
from trainer.loop.train import train
from trainer.storage import open_store

pytestmark = pytest.mark.e2e

# Run ids are run dir names. run-a trains further than run-b: the store of run-b lacks
# run-a's newest checkpoints, so a sync into it would have something to replace.
STEPS = {"run-a": 6, "run-b": 3}
LONG_RUN = ("--batch-size", "8", "--epochs", "50", "--patience", "100")
FIRST_EXIT_SECONDS = 60
# The run dir's uploader lock names its holder (ARCHITECTURE.md, "Run directory additions").
UPLOADER_LOCK = ".uploader.lock"


@pytest.fixture(scope="module")
def trained(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """run-a and run-b trained with no store, a step file every step (the last 3 kept)."""
    runs = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLUCOSE_IMDS_URL", "off")
        for run_id, steps in STEPS.items():
            config = tiny_run_config(tiny_data, runs / run_id, max_steps=steps)
            assert train(dataclasses.replace(config, checkpoint_every_steps=1)) == 0
    return {run_id: runs / run_id for run_id in STEPS}


def _copy(run_dir: Path, to: Path) -> Path:
    """A copy under the same name (the run id), made of hard links: best.pt stays the
    same file as its step file, as in the run dir itself."""
    return Path(shutil.copytree(run_dir, to / run_dir.name, copy_function=os.link))


def _small_objects(uri: str) -> dict[str, bytes]:
    """Every key, with the content of all but the checkpoints themselves (pointers and
    records say which checkpoint each is)."""
    store = open_store(uri)
    return {k: b"" if k.endswith(".pt") else store.read_bytes(k) for k in store.list()}


def _sync(run_dir: Path, uri: str) -> int:
    return main(["sync", "--run-dir", str(run_dir), "--checkpoint-uri", uri])


def _newest_step_file(run_dir: Path) -> str:
    return max(p.name for p in (run_dir / "checkpoints").glob("step-*.pt"))


def test_sync_into_another_runs_store_is_refused_and_leaves_it_as_it_was(
    trained: dict[str, Path], store_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_a, run_b = _copy(trained["run-a"], tmp_path), _copy(trained["run-b"], tmp_path)
    uri_b = f"{store_uri}/run-b"
    assert _sync(run_b, uri_b) == 0
    before = _small_objects(uri_b)
    capsys.readouterr()
    code = _sync(run_a, uri_b)
    assert _small_objects(uri_b) == before
    assert code == EXIT_USER_ERROR
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert f"--checkpoint-uri {uri_b} holds run 'run-b' (its .run-id), not 'run-a'" in error


def test_sync_into_another_runs_store_before_its_status_json_landed_is_refused(
    trained: dict[str, Path], store_uri: str, tmp_path: Path
) -> None:
    # run-b's checkpoints are up, its status.json not yet (the mirror comes later).
    run_a, run_b = _copy(trained["run-a"], tmp_path), _copy(trained["run-b"], tmp_path)
    uri_b = f"{store_uri}/run-b"
    assert _sync(run_b, uri_b) == 0
    open_store(uri_b).delete("status.json")
    before = _small_objects(uri_b)
    assert _sync(run_a, uri_b) == EXIT_USER_ERROR
    assert _small_objects(uri_b) == before


@pytest.mark.parametrize("run_dir", ["missing", "no run in it"])
def test_sync_of_a_directory_that_is_no_run_dir_is_a_one_line_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture, run_dir: str
) -> None:
    path = tmp_path / "runs" / "r1"
    if run_dir == "no run in it":
        path.mkdir(parents=True)
        (path / "notes.txt").write_text("not a run")
    store = tmp_path / "store"
    assert _sync(path, f"file://{store}") == EXIT_USER_ERROR
    assert not store.exists()
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"error: --run-dir {path}"), error


def test_a_sync_while_the_run_trains_is_refused_with_75_naming_the_trainer(
    tiny_data: Path,
    tmp_path: Path,
    moto_server: S3Emulator,
    s3_uri: str,
    capsys: pytest.CaptureFixture,
) -> None:
    uri, run_dir = f"{s3_uri}/run", tmp_path / "run"
    flags = (*LONG_RUN, "--checkpoint-every-steps", "2", "--checkpoint-uri", uri)
    trainer = start_training(tiny_data, run_dir, *flags, env=moto_server.env)
    try:
        wait_for_step(run_dir, 4, trainer)
        assert _sync(run_dir, uri) == EXIT_STOPPED
        error = capsys.readouterr().err
        assert error.count("\n") == 1, error
        holder = f"(pid {trainer.pid}, `python -m trainer train` since"
        assert f"error: another process uploads {run_dir} {holder}" in error
        trainer.send_signal(signal.SIGTERM)
        assert wait_for_exit(trainer, run_dir) == EXIT_STOPPED
    finally:
        trainer.kill()
    store = open_store(uri)
    assert layout.read_pointer(store, layout.LATEST_KEY) == _newest_step_file(run_dir)
    assert not list((run_dir / "checkpoints" / ".outbox").iterdir())  # everything landed


def _first_to_exit(processes: list[subprocess.Popen]) -> subprocess.Popen | None:
    deadline = time.monotonic() + FIRST_EXIT_SECONDS
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                return process
        time.sleep(0.1)
    return None


def test_of_two_syncs_at_once_one_uploads_and_the_other_is_refused_with_75(
    trained: dict[str, Path], tmp_path: Path, private_moto_server: S3Emulator
) -> None:
    # The store hangs while both start, so the first to take the run dir is still at
    # work when the second arrives, whichever starts first.
    run_dir, uri = _copy(trained["run-a"], tmp_path), f"{private_moto_server.create_bucket()}/a"
    command = ["-m", "trainer", "sync", "--run-dir", str(run_dir), "--checkpoint-uri", uri]
    logs = [tmp_path / f"sync-{n}.log" for n in (1, 2)]
    private_moto_server.stall()
    syncs = [start_process(command, log, private_moto_server.env) for log in logs]
    try:
        refused = _first_to_exit(syncs)
        private_moto_server.unstall()
        assert refused is not None, "neither sync gave way while the other was at work"
        [uploader] = [sync for sync in syncs if sync is not refused]
        assert refused.returncode == EXIT_STOPPED
        refusal = logs[syncs.index(refused)].read_text()
        assert refusal.count("\n") == 1, refusal
        holder = f"(pid {uploader.pid}, `python -m trainer sync` since"
        assert f"error: another process uploads {run_dir} {holder}" in refusal
        assert uploader.wait(FIRST_EXIT_SECONDS) == 0, logs[syncs.index(uploader)].read_text()
    finally:
        private_moto_server.unstall()
        for sync in syncs:
            sync.kill()
    store = open_store(uri)
    assert layout.read_pointer(store, layout.LATEST_KEY) == _newest_step_file(run_dir)
    best = run_dir / "checkpoints" / "best.pt"
    best_name = next(p.name for p in best.parent.glob("step-*.pt") if p.samefile(best))
    assert layout.read_pointer(store, layout.BEST_KEY) == best_name


def _holds_the_lock(run_dir: Path, process: subprocess.Popen) -> bool:
    lock = run_dir / UPLOADER_LOCK
    return lock.is_file() and f'"pid": {process.pid},' in lock.read_text()


def test_a_run_started_while_a_sync_uploads_its_run_dir_exits_75_writing_nothing(
    trained: dict[str, Path],
    tiny_data: Path,
    tmp_path: Path,
    private_moto_server: S3Emulator,
    capsys: pytest.CaptureFixture,
) -> None:
    # The box's resume unit starts the run's container while its user's sync is at
    # work (the store hangs): the run leaves the run dir to it and is started again later.
    run_dir, uri = _copy(trained["run-a"], tmp_path), f"{private_moto_server.create_bucket()}/a"
    command = ["-m", "trainer", "sync", "--run-dir", str(run_dir), "--checkpoint-uri", uri]
    private_moto_server.stall()
    sync = start_process(command, tmp_path / "sync.log", private_moto_server.env)
    try:
        deadline = time.monotonic() + FIRST_EXIT_SECONDS
        while not _holds_the_lock(run_dir, sync):
            assert time.monotonic() < deadline and sync.poll() is None, "the sync took no lock"
            time.sleep(0.1)
        status = (run_dir / "status.json").read_bytes()
        flags = ["--model", "resnet18", "--epochs", "2", "--batch-size", "32", "--max-steps", "6"]
        train_args = ["--data", str(tiny_data), "--run-dir", str(run_dir), "--checkpoint-uri", uri]
        assert main(["train", *train_args, *flags]) == EXIT_STOPPED
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith(
            f"error: another process uploads {run_dir}"
        )
        assert (run_dir / "status.json").read_bytes() == status
        private_moto_server.unstall()
        assert sync.wait(FIRST_EXIT_SECONDS) == 0
    finally:
        private_moto_server.unstall()
        sync.kill()
