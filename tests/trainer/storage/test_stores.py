"""trainer.storage against a real directory, moto (S3) and Azurite (Blob)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.storage import (
    InvalidStorageUri,
    ObjectNotFound,
    StorageError,
    join_uri,
    open_store,
    parse_uri,
)
from trainer.storage.store import MULTIPART_THRESHOLD_BYTES


def test_large_file_round_trips_in_parts_with_progress(store_uri: str, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(MULTIPART_THRESHOLD_BYTES + 3 * 1024 * 1024 + 7))
    store = open_store(store_uri)
    uploaded: list[int] = []
    downloaded: list[int] = []
    store.put_file("checkpoints/big.pt", source, progress=uploaded.append)
    store.get_file("checkpoints/big.pt", tmp_path / "out" / "big.pt", progress=downloaded.append)
    assert (tmp_path / "out" / "big.pt").read_bytes() == source.read_bytes()
    assert sum(uploaded) == sum(downloaded) == source.stat().st_size


def test_bytes_list_exists_and_delete(store_uri: str) -> None:
    store = open_store(store_uri)
    store.write_bytes("a/LATEST", b"step-1")
    store.write_bytes("a/b/c.json", b"{}")
    store.write_bytes("z.txt", b"z")
    assert store.read_bytes("a/LATEST") == b"step-1"
    assert store.list("a/") == ["a/LATEST", "a/b/c.json"]
    assert store.list() == ["a/LATEST", "a/b/c.json", "z.txt"]
    assert store.exists("z.txt") and not store.exists("nope")
    store.delete("z.txt")
    store.delete("z.txt")  # deleting what is gone is not an error
    assert not store.exists("z.txt")


def test_a_listing_gives_sizes_and_a_version_that_a_rewrite_changes(store_uri: str) -> None:
    store = open_store(store_uri)
    store.write_bytes("checkpoints/LATEST", b"step-000000100-epoch-0001.pt")
    store.write_bytes("metrics.jsonl", b"{}\n")
    before = store.list_info()
    store.write_bytes("checkpoints/LATEST", b"step-000000225-epoch-0002.pt")  # same size
    after = store.list_info()
    assert sorted(after) == store.list() == ["checkpoints/LATEST", "metrics.jsonl"]
    assert after["checkpoints/LATEST"].size == len(b"step-000000225-epoch-0002.pt")
    assert after["checkpoints/LATEST"].version != before["checkpoints/LATEST"].version
    assert after["metrics.jsonl"] == before["metrics.jsonl"]


def test_a_range_reads_that_part_of_an_object_alone(store_uri: str) -> None:
    store = open_store(store_uri)
    store.write_bytes("train.log", bytes(range(256)) * 4)
    assert store.read_range("train.log", 1000, 100) == bytes(range(232, 256))  # its end
    assert store.read_range("train.log", 255, 3) == bytes([255, 0, 1])
    assert store.read_range("train.log", 0, 0) == b""
    assert store.read_range("train.log", 1024, 10) == b""  # at the end: nothing, no error
    assert store.read_range("train.log", 5000, 10) == b""  # past it too
    with pytest.raises(ObjectNotFound):
        store.read_range("none.log", 0, 10)


def test_write_replaces_an_object_whole(store_uri: str) -> None:
    store = open_store(store_uri)
    store.write_bytes("LATEST", b"step-000000001")
    store.write_bytes("LATEST", b"step-2")
    assert store.read_bytes("LATEST") == b"step-2"


def test_missing_object_raises_object_not_found(store_uri: str, tmp_path: Path) -> None:
    store = open_store(store_uri)
    with pytest.raises(ObjectNotFound):
        store.read_bytes("checkpoints/none.pt")
    with pytest.raises(ObjectNotFound):
        store.get_file("checkpoints/none.pt", tmp_path / "none.pt")
    assert not (tmp_path / "none.pt").exists()


def test_prefix_isolates_stores_in_one_bucket(store_uri: str) -> None:
    one = open_store(join_uri(store_uri, "run-1"))
    two = open_store(join_uri(store_uri, "run-10"))
    one.write_bytes("metrics.jsonl", b"1")
    two.write_bytes("metrics.jsonl", b"10")
    assert one.list() == ["metrics.jsonl"]
    assert open_store(store_uri).list() == ["run-1/metrics.jsonl", "run-10/metrics.jsonl"]


@pytest.mark.parametrize(
    "uri", ["gs://bucket", "s3://", "az://account", "file://relative/path", "/abs/path"]
)
def test_unsupported_uri_names_the_forms_expected(uri: str) -> None:
    with pytest.raises(InvalidStorageUri, match="expected file:///abs/path, s3://"):
        parse_uri(uri)


def test_uri_parts_are_parsed() -> None:
    assert parse_uri("az://acct/cont/runs/r1").prefix == "runs/r1"
    assert parse_uri("az://acct/cont").container == "cont"
    assert parse_uri("s3://bucket/a/b/").prefix == "a/b"
    assert join_uri("s3://bucket/", "/runs/", "r1") == "s3://bucket/runs/r1"


def test_connection_string_for_another_account_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;",
    )
    with pytest.raises(StorageError, match="is for account 'devstoreaccount1'"):
        open_store("az://prodaccount/runs")


def test_file_store_cannot_escape_its_root(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="escapes"):
        open_store(f"file://{tmp_path}/store").write_bytes("../outside", b"x")


def test_a_file_store_whose_directory_became_a_file_is_down_not_empty(tmp_path: Path) -> None:
    # How the tests take a file:// store down; a store that only says "no object" there
    # would send `trainer sync` on to upload into it until its budget ran out.
    (tmp_path / "store").write_text("storage is down")
    store = open_store(f"file://{tmp_path}/store")
    with pytest.raises(OSError) as down:
        store.read_bytes("status.json")
    assert not isinstance(down.value, ObjectNotFound)


def test_importing_storage_loads_no_sdk_and_no_torch() -> None:
    code = (
        "import sys, trainer.storage as s; s.open_store('file:///tmp/x');"
        "print(sorted(m for m in ('torch','boto3','azure.storage.blob') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
