"""trainer.checkpoints.sync and .layout against real stores (dir, moto, Azurite)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.blob import BlobEmulator
from tests.fixtures.s3 import S3Emulator
from trainer.checkpoints import layout
from trainer.checkpoints.sync import OUTBOX_DIR_NAME, RunSync, SyncConfig
from trainer.storage import open_store
from trainer.storage.local import FileStore

FAST_RETRY = SyncConfig(mirror_every_seconds=3600, retry_initial_seconds=0.2, retry_max_seconds=1)
FLUSH_SECONDS = 30


def _checkpoint(run_dir: Path, step: int, size: int = 64 * 1024) -> tuple[Path, str]:
    path = run_dir / "checkpoints" / f"step-{step:09d}-epoch-0000.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path, layout.sha256_of(path)


def _run_files(run_dir: Path) -> None:
    (run_dir / "tb").mkdir(parents=True, exist_ok=True)
    (run_dir / "plots").mkdir(exist_ok=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (run_dir / "status.json").write_text('{"state": "running"}')
    (run_dir / "tb" / "events.out.tfevents.1").write_bytes(b"\x00" * 100)
    (run_dir / "plots" / "loss.png").write_bytes(b"png")
    (run_dir / ".status.json.tmp").write_text("half")
    (run_dir / "STOPPED_BY_USER").write_text("")  # the box's marker stays on the box


def test_flush_uploads_checkpoint_pointers_and_run_files(store_uri: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run_files(run_dir)
    path, sha = _checkpoint(run_dir, 10)
    sync = RunSync(open_store(store_uri), run_dir, FAST_RETRY).start()
    sync.publish_checkpoint(path, sha, best=True)
    assert sync.close(FLUSH_SECONDS)
    store = open_store(store_uri)
    assert store.list() == [
        ".run-id",  # the owner marker, with the first upload
        "checkpoints/BEST",
        "checkpoints/LATEST",
        "checkpoints/step-000000010-epoch-0000.pt",
        "checkpoints/step-000000010-epoch-0000.pt.sha256",
        "metrics.jsonl",
        "plots/loss.png",
        "status.json",
        "tb/events.out.tfevents.1",
    ]
    assert layout.read_pointer(store, layout.LATEST_KEY) == "step-000000010-epoch-0000.pt"
    assert (
        layout.download_verified(store, "step-000000010-epoch-0000.pt", tmp_path / "back.pt") == sha
    )


class RecordingStore(FileStore):
    """A real file store that also records the order of its writes."""

    def __init__(self, root: Path) -> None:
        super().__init__(f"file://{root}", root)
        self.writes: list[str] = []

    def put_file(self, key, path, progress=None):
        super().put_file(key, path, progress)
        self.writes.append(key)

    def write_bytes(self, key, data):
        super().write_bytes(key, data)
        self.writes.append(key)


def test_pointer_is_written_after_object_and_hash(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "store")
    sync = RunSync(store, tmp_path / "run", FAST_RETRY).start()
    path, sha = _checkpoint(tmp_path / "run", 7)
    sync.publish_checkpoint(path, sha)
    assert sync.close(FLUSH_SECONDS)
    assert store.writes[:4] == [
        ".run-id",  # the owner marker first: the store is this run's before anything lands
        "checkpoints/step-000000007-epoch-0000.pt",
        "checkpoints/step-000000007-epoch-0000.pt.sha256",
        "checkpoints/LATEST",
    ]


@pytest.mark.e2e
def test_reader_never_sees_half_a_checkpoint(s3_uri: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    reader_store, seen, bad = open_store(s3_uri), set(), []
    stop = threading.Event()

    def read_latest_until_stopped() -> None:
        for attempt in range(10_000):
            if stop.is_set():
                return
            name = layout.read_pointer(reader_store, layout.LATEST_KEY)
            if name is not None:
                seen.add(name)
                dest = tmp_path / f"read-{attempt}.pt"
                if layout.download_verified(reader_store, name, dest) is None:
                    bad.append(name)
                dest.unlink(missing_ok=True)

    reader = threading.Thread(target=read_latest_until_stopped)
    reader.start()
    sync = RunSync(open_store(s3_uri), run_dir, SyncConfig(keep_last=10)).start()
    try:
        for step in range(1, 5):
            sync.publish_checkpoint(*_checkpoint(run_dir, step, size=20 * 1024 * 1024))
            assert sync.flush(FLUSH_SECONDS)
    finally:
        stop.set()
        reader.join()
        sync.close(FLUSH_SECONDS)
    assert bad == [] and len(seen) >= 2


def test_store_keeps_last_k_and_best(store_uri: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sync = RunSync(open_store(store_uri), run_dir, SyncConfig(keep_last=2)).start()
    for step in range(1, 6):
        sync.publish_checkpoint(*_checkpoint(run_dir, step), best=step == 2)
        assert sync.flush(FLUSH_SECONDS)
    sync.close(FLUSH_SECONDS)
    store = open_store(store_uri)
    assert layout.remote_names(store) == [
        "step-000000002-epoch-0000.pt",
        "step-000000004-epoch-0000.pt",
        "step-000000005-epoch-0000.pt",
    ]
    assert layout.read_pointer(store, layout.BEST_KEY) == "step-000000002-epoch-0000.pt"


def test_an_older_checkpoint_uploaded_late_never_moves_latest_back(
    store_uri: str, tmp_path: Path
) -> None:
    # As a best that waited out an outage, or one `trainer sync` sends, lands after
    # newer ones: beside them, the resume's candidates intact.
    run_dir = tmp_path / "run"
    sync = RunSync(open_store(store_uri), run_dir, FAST_RETRY).start()
    sync.publish_checkpoint(*_checkpoint(run_dir, 5))
    assert sync.flush(FLUSH_SECONDS)
    sync.publish_checkpoint(*_checkpoint(run_dir, 3), best=True)
    assert sync.close(FLUSH_SECONDS)
    store = open_store(store_uri)
    assert layout.read_pointer(store, layout.LATEST_KEY) == "step-000000005-epoch-0000.pt"
    assert layout.read_pointer(store, layout.BEST_KEY) == "step-000000003-epoch-0000.pt"
    assert layout.candidates(store) == [
        "step-000000005-epoch-0000.pt",
        "step-000000003-epoch-0000.pt",
    ]


def test_changed_files_are_mirrored_again(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "store")
    run_dir = tmp_path / "run"
    _run_files(run_dir)
    sync = RunSync(store, run_dir, FAST_RETRY).start()
    assert sync.flush(FLUSH_SECONDS)
    with open(run_dir / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 2}\n')
    assert sync.close(FLUSH_SECONDS)
    assert store.writes.count("metrics.jsonl") == 2
    assert store.writes.count("status.json") == 1
    assert (tmp_path / "store" / "metrics.jsonl").read_text().count("step") == 2


def test_waiting_checkpoints_are_bounded_while_storage_is_down(tmp_path: Path) -> None:
    unwritable = tmp_path / "store"
    unwritable.write_text("a file where the store's directory should be")
    run_dir = tmp_path / "run"
    sync = RunSync(open_store(f"file://{unwritable}"), run_dir, SyncConfig(keep_last=2)).start()
    for step in range(1, 11):
        sync.publish_checkpoint(*_checkpoint(run_dir, step), best=step == 3)
    assert not sync.close(1)
    assert sync.status.pending_checkpoints == 3
    outbox = sorted(p.name for p in (run_dir / "checkpoints" / OUTBOX_DIR_NAME).glob("*.pt"))
    assert outbox == [
        "step-000000003-epoch-0000.pt",
        "step-000000009-epoch-0000.pt",
        "step-000000010-epoch-0000.pt",
    ]


def _outage_run(emulator: S3Emulator | BlobEmulator, uri: str, tmp_path: Path, caplog) -> None:
    """Storage dies after one upload; the run goes on; everything lands on return."""
    run_dir = tmp_path / "run"
    _run_files(run_dir)
    sync = RunSync(open_store(uri), run_dir, FAST_RETRY).start()
    sync.publish_checkpoint(*_checkpoint(run_dir, 1))
    assert sync.flush(FLUSH_SECONDS)

    emulator.kill()
    started = time.monotonic()
    sync.publish_checkpoint(*_checkpoint(run_dir, 2, size=20 * 1024 * 1024))
    (run_dir / "summary.json").write_text('{"best_epoch": 1}')
    sync.request_mirror()
    assert time.monotonic() - started < 1.0, "publishing must not wait for storage"
    with caplog.at_level(logging.WARNING, logger="trainer.checkpoints.sync"):
        assert not sync.flush(2)
        for _ in range(300):  # the SDKs' own few retries come first: up to ~30 s
            if sync.status.failing_since is not None:
                break
            time.sleep(0.1)
    assert sync.status.failing_since is not None
    assert any("training goes on" in r.getMessage() for r in caplog.records)

    emulator.restart()
    assert sync.close(FLUSH_SECONDS)
    store = open_store(uri)
    assert layout.read_pointer(store, layout.LATEST_KEY) == "step-000000002-epoch-0000.pt"
    assert layout.download_verified(store, "step-000000002-epoch-0000.pt", tmp_path / "back.pt")
    assert store.read_bytes("summary.json") == b'{"best_epoch": 1}'
    assert sync.status.failing_since is None


@pytest.mark.e2e
def test_uploads_catch_up_after_s3_restarts(
    private_moto_server: S3Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = private_moto_server.create_bucket()
    _outage_run(private_moto_server, uri, tmp_path, caplog)


@pytest.mark.e2e
def test_uploads_catch_up_after_azurite_restarts(
    private_azurite: BlobEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = private_azurite.create_container()
    _outage_run(private_azurite, uri, tmp_path, caplog)


def _stored_checkpoints(tmp_path: Path, steps) -> object:
    store = open_store(f"file://{tmp_path}/store")
    for step in steps:
        path, sha = _checkpoint(tmp_path / "run", step)
        layout.upload_checkpoint(store, path.name, path, sha)
    return store


def test_candidates_are_latest_then_older_never_newer(tmp_path: Path) -> None:
    store = _stored_checkpoints(tmp_path, (1, 2, 3))
    layout.set_pointer(store, layout.LATEST_KEY, "step-000000002-epoch-0000.pt")
    assert layout.candidates(store) == [
        "step-000000002-epoch-0000.pt",
        "step-000000001-epoch-0000.pt",
    ]


def test_no_latest_pointer_means_no_candidates(tmp_path: Path) -> None:
    assert layout.candidates(_stored_checkpoints(tmp_path, (1,))) == []


@pytest.mark.parametrize("pointer", ["../../../.bashrc", "/etc/passwd", "step-1.pt", "last.pt"])
def test_a_pointer_that_names_no_step_file_is_ignored(
    tmp_path: Path, pointer: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = _stored_checkpoints(tmp_path, (1,))
    store.write_bytes(layout.LATEST_KEY, pointer.encode())
    with caplog.at_level(logging.WARNING):
        assert layout.read_pointer(store, layout.LATEST_KEY) is None
    assert "not a checkpoint name" in caplog.text
    assert layout.candidates(store) == []


def test_damaged_object_is_not_downloaded_as_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"file://{tmp_path}/store")
    path, sha = _checkpoint(tmp_path / "run", 1)
    layout.upload_checkpoint(store, path.name, path, sha)
    damaged = tmp_path / "store" / "checkpoints" / path.name
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"?")
    dest = tmp_path / "dl" / path.name
    with caplog.at_level(logging.WARNING):
        assert layout.download_verified(store, path.name, dest) is None
    assert not dest.exists()
    assert "does not match its record" in caplog.text


def test_object_without_hash_is_skipped(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    path, _ = _checkpoint(tmp_path / "run", 1)
    store.put_file(layout.checkpoint_key(path.name), path)
    assert layout.download_verified(store, path.name, tmp_path / "dl.pt") is None


@pytest.mark.parametrize(
    "kwargs", [{"keep_last": 0}, {"mirror_every_seconds": 0}, {"retry_initial_seconds": 99}]
)
def test_sync_config_rejects_nonsense(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SyncConfig(**kwargs)


def test_symlinks_in_the_run_dir_are_not_mirrored(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run_files(run_dir)
    credentials = tmp_path / "credentials"
    credentials.write_text("aws_secret_access_key = not-for-the-bucket\n")
    (run_dir / "tb" / "stolen").symlink_to(credentials)
    (run_dir / "plots" / "home").symlink_to(tmp_path, target_is_directory=True)
    store = RecordingStore(tmp_path / "store")
    assert RunSync(store, run_dir, FAST_RETRY).start().close(FLUSH_SECONDS)
    assert "metrics.jsonl" in store.writes
    assert not [key for key in store.writes if "stolen" in key or key.startswith("plots/home")]
