"""A bucket writer (anything on the box) against `fab download` and the dataset fetch:
keys and manifests that would write outside their directory, on a directory store,
moto S3 and Azurite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.data.transfer import download_run
from tests.fixtures.object_store import plant_hostile_keys
from trainer.config import UserError
from trainer.data.manifest import fetch
from trainer.storage import open_store


def _files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file() or path.is_symlink()}


def test_download_refuses_keys_that_climb_out_and_writes_the_rest(
    store_uri: str, tmp_path: Path
) -> None:
    run_uri = f"{store_uri}/r1"
    open_store(run_uri).write_bytes("summary.json", b'{"best_epoch": 1}\n')
    hostile = plant_hostile_keys(run_uri)
    directory = tmp_path / "laptop" / "runs" / "r1"
    before = _files_under(tmp_path)
    report = download_run(run_uri, directory, {})
    assert sorted(report.refused) == sorted(hostile)
    assert report.fetched == ["summary.json"]
    written = _files_under(tmp_path) - before
    assert written == {directory / "summary.json", directory / "manifest.json"}
    manifest = json.loads((directory / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["summary.json"]


def test_a_symlink_in_a_directory_store_is_not_an_object(tmp_path: Path) -> None:
    store_root = tmp_path / "store" / "r1"
    store_root.mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("the laptop's secret\n")
    (store_root / "summary.json").write_text("{}\n")
    (store_root / "stolen.txt").symlink_to(tmp_path / "secret.txt")
    report = download_run(f"file://{store_root}", tmp_path / "dl", {})
    assert report.fetched == ["summary.json"]
    assert not (tmp_path / "dl" / "stolen.txt").exists()


def _manifest(files: dict[str, bytes]) -> bytes:
    import hashlib

    entries = {
        name: {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
        for name, body in files.items()
    }
    return json.dumps({"name": "evil", "files": entries}).encode()


@pytest.mark.parametrize("name", ["../../../.bashrc", "{tmp}/outside/x", "sub\\..\\..\\x"])
def test_dataset_fetch_refuses_a_manifest_naming_files_outside(
    store_uri: str, tmp_path: Path, name: str
) -> None:
    name = name.format(tmp=tmp_path)  # an absolute name, but one a failure cannot hurt
    uri = f"{store_uri}/datasets/evil"
    store = open_store(uri)
    store.write_bytes("windows.npy", b"data")
    store.write_bytes("manifest.json", _manifest({"windows.npy": b"data", name: b"payload"}))
    cache = tmp_path / "box" / "datasets" / "evil"
    before = _files_under(tmp_path)
    with pytest.raises(UserError, match="refused object key") as refused:
        fetch(uri, cache)
    assert "\n" not in str(refused.value)
    assert _files_under(tmp_path) == before


def test_dataset_fetch_refuses_a_manifest_that_is_no_manifest(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/store/datasets/odd"
    open_store(uri).write_bytes("manifest.json", b'{"files": {"windows.npy": "sha"}}')
    with pytest.raises(UserError, match="is not a dataset manifest"):
        fetch(uri, tmp_path / "cache")


def test_download_skips_a_key_too_long_for_the_file_system_naming_it_and_fetches_the_rest(
    s3_uri: str, tmp_path: Path
) -> None:
    run_uri = f"{s3_uri}/r1"
    store = open_store(run_uri)
    good = {f"{name}.json": b"{}\n" for name in ("a", "b", "metrics", "status", "summary")}
    too_long = ["0" + "x" * 300 + "/f.json", "checkpoints/" + "y" * 255 + ".json"]
    for key, body in {**good, **dict.fromkeys(too_long, b"{}\n")}.items():
        store.write_bytes(key, body)
    directory = tmp_path / "laptop" / "runs" / "r1"
    report = download_run(run_uri, directory, {})
    assert sorted(report.fetched) == sorted(good)
    assert sorted(report.failed) == sorted(too_long)
    assert all("File name too long" in why for why in report.failed.values())
    assert all((directory / name).read_bytes() == b"{}\n" for name in good)
