"""Stops, spot notices and storage outages against a real trainer process and real
storage (moto, Azurite), with the fake metadata service on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from box.contract import EXIT_STOPPED
from tests.fixtures.s3 import S3Emulator
from tests.trainer.trainer_process import (
    output_of,
    start_training,
    status_of,
    wait_for_exit,
    wait_for_step,
)
from trainer.checkpoints import checkpoint_file, layout
from trainer.storage import open_store

pytestmark = pytest.mark.e2e

# Batch 8 on the tiny data: 18 steps an epoch, so a stop lands mid-epoch.
LONG_RUN = ("--batch-size", "8", "--epochs", "50", "--patience", "100")
WAIT_SECONDS = 120


def _remote_checkpoint(uri: str, tmp_path: Path) -> dict:
    store = open_store(uri)
    name = layout.read_pointer(store, layout.LATEST_KEY)
    assert name is not None, f"no LATEST at {uri}: {store.list()}"
    dest = tmp_path / "from-store" / name
    assert layout.download_verified(store, name, dest) is not None
    return checkpoint_file.load(dest)


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("store_kind", ["s3", "az"])
def test_sigterm_mid_epoch_uploads_exits_75_and_resumes(
    tiny_data: Path, tmp_path: Path, store_kind: str, request: pytest.FixtureRequest
) -> None:
    emulator = request.getfixturevalue("moto_server" if store_kind == "s3" else "azurite")
    base = request.getfixturevalue("s3_uri" if store_kind == "s3" else "blob_uri")
    uri, run_dir = f"{base}/sigterm", tmp_path / "run"
    flags = (*LONG_RUN, "--checkpoint-uri", uri)
    process = start_training(tiny_data, run_dir, *flags, env=emulator.env)
    wait_for_step(run_dir, 3, process)
    process.send_signal(signal.SIGTERM)
    assert wait_for_exit(process, run_dir) == EXIT_STOPPED
    status = status_of(run_dir)
    assert status["state"] == "stopped" and status["exit_code"] == EXIT_STOPPED
    state = _remote_checkpoint(uri, tmp_path)
    assert state["step"] == status["step"] and 0 < state["step_in_epoch"] < 18
    assert json.loads(open_store(uri).read_bytes("status.json"))["state"] == "stopped"

    again = start_training(tiny_data, run_dir, *flags, env=emulator.env)
    wait_for_step(run_dir, state["step"] + 1, again)
    again.send_signal(signal.SIGTERM)
    assert wait_for_exit(again, run_dir) == EXIT_STOPPED
    assert f"resume: step {state['step']}, epoch 1" in output_of(run_dir)


def test_aws_spot_notice_checkpoints_uploads_and_exits_75(
    tiny_data: Path, tmp_path: Path, moto_server: S3Emulator, s3_uri: str, fake_metadata
) -> None:
    uri, run_dir = f"{s3_uri}/aws-spot", tmp_path / "run"
    env = {**moto_server.env, "GLUCOSE_IMDS_URL": fake_metadata.url}
    process = start_training(tiny_data, run_dir, *LONG_RUN, "--checkpoint-uri", uri, env=env)
    wait_for_step(run_dir, 2, process)
    fake_metadata.spot_interruption("terminate")
    assert wait_for_exit(process, run_dir) == EXIT_STOPPED
    status = status_of(run_dir)
    assert status["state"] == "preempted"
    assert _remote_checkpoint(uri, tmp_path)["step"] == status["step"]
    assert "spot terminate" in output_of(run_dir)


def test_azure_preempt_is_acknowledged_only_after_the_upload(
    tiny_data: Path, tmp_path: Path, azurite, blob_uri: str, fake_metadata
) -> None:
    uri, run_dir = f"{blob_uri}/azure-preempt", tmp_path / "run"
    store = open_store(uri)
    latest_when_acknowledged: list[str | None] = []
    answer = fake_metadata.answer

    def answer_and_note_the_store(seen):
        if seen.method == "POST":
            latest_when_acknowledged.append(layout.read_pointer(store, layout.LATEST_KEY))
        return answer(seen)

    fake_metadata.answer = answer_and_note_the_store
    env = {**azurite.env, "GLUCOSE_IMDS_URL": fake_metadata.url}
    process = start_training(tiny_data, run_dir, *LONG_RUN, "--checkpoint-uri", uri, env=env)
    wait_for_step(run_dir, 2, process)
    event_id = fake_metadata.azure_preempt(time.time() + 30)
    assert wait_for_exit(process, run_dir) == EXIT_STOPPED
    assert status_of(run_dir)["state"] == "preempted"
    assert fake_metadata.acknowledged == [event_id]
    final = _remote_checkpoint(uri, tmp_path)
    assert latest_when_acknowledged == [checkpoint_file.checkpoint_name(final)]


def test_storage_killed_mid_run_catches_up_when_it_returns(
    tiny_data: Path, tmp_path: Path, private_moto_server: S3Emulator
) -> None:
    uri, run_dir = f"{private_moto_server.create_bucket()}/outage", tmp_path / "run"
    flags = ("--batch-size", "8", "--epochs", "2", "--checkpoint-every-steps", "4")
    process = start_training(
        tiny_data, run_dir, *flags, "--checkpoint-uri", uri, env=private_moto_server.env
    )
    store = open_store(uri)
    _wait_until(lambda: layout.read_pointer(store, layout.LATEST_KEY), "a first upload")
    private_moto_server.kill()
    down_at = wait_for_step(run_dir, 1, process)
    wait_for_step(run_dir, down_at + 8, process)  # training goes on without storage
    private_moto_server.restart()
    assert wait_for_exit(process, run_dir) == 0
    newest = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*.pt"))[-1]
    assert layout.read_pointer(store, layout.LATEST_KEY) == newest
    assert json.loads(store.read_bytes("status.json"))["state"] == "finished"
    assert {"summary.json", "report.md", "metrics.jsonl"} <= set(store.list())
    assert "training goes on" in output_of(run_dir)


def _best_only_in_the_outbox(checkpoints: Path, stored_best_sha256: str) -> bool:
    """best.pt is a checkpoint the store never got, and its step file was pruned."""
    best = checkpoints / "best.pt"
    try:
        if any(best.samefile(step_file) for step_file in checkpoints.glob("step-*.pt")):
            return False
        return layout.sha256_of(best) != stored_best_sha256
    except FileNotFoundError:  # relinked or pruned while we looked
        return False


def test_a_best_saved_while_storage_was_down_reaches_the_store_after_a_kill(
    tiny_data: Path, tmp_path: Path, private_moto_server: S3Emulator
) -> None:
    # The tiny run's val MAE improves at epochs 1 and 4 and not again until its 11th.
    # S3 dies once the first BEST landed; the better one of epoch 4 waits, its step
    # file pruned, and the run is killed before S3 returns (empty: moto keeps nothing).
    uri, run_dir = f"{private_moto_server.create_bucket()}/best", tmp_path / "run"
    flags = (*LONG_RUN, "--checkpoint-every-steps", "4", "--checkpoint-uri", uri)
    process = start_training(tiny_data, run_dir, *flags, env=private_moto_server.env)
    store, checkpoints = open_store(uri), run_dir / "checkpoints"
    try:
        _wait_until(lambda: layout.read_pointer(store, layout.BEST_KEY), "a first BEST")
        stored = layout.read_pointer(store, layout.BEST_KEY)
        stored_sha256 = store.read_bytes(layout.checkpoint_key(stored) + layout.HASH_SUFFIX)
        private_moto_server.kill()
        _wait_until(
            lambda: _best_only_in_the_outbox(
                checkpoints, layout.parse_hash_line(stored_sha256.decode())
            ),
            "a better checkpoint, its step file pruned",
        )
    finally:
        process.kill()
    process.wait()
    private_moto_server.restart()

    # The next start resumes from the run dir's newest and, told to stop there, ends.
    newest = checkpoint_file.load(max(checkpoints.glob("step-*.pt")))["step"]
    again = start_training(
        tiny_data, run_dir, *flags, "--max-steps", str(newest), env=private_moto_server.env
    )
    assert wait_for_exit(again, run_dir) == 0, output_of(run_dir)
    name = layout.read_pointer(store, layout.BEST_KEY)
    assert name is not None, f"no BEST in the store: {store.list()}"
    record = store.read_bytes(layout.checkpoint_key(name) + layout.HASH_SUFFIX).decode()
    assert layout.parse_hash_line(record) == layout.sha256_of(checkpoints / "best.pt")
    best_step = json.loads((run_dir / "summary.json").read_text())["best_step"]
    assert name.startswith(f"step-{best_step:09d}-")
