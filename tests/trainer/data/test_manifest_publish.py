"""trainer.data.manifest.publish (what `fab prepare-data` runs on the box): the files,
then the manifest `fab upload-data` writes; a second publish sends nothing."""

import json

from trainer.data.manifest import build_manifest, publish


def _dataset(directory):
    directory.mkdir()
    (directory / "windows.npy").write_bytes(b"w" * 1000)
    (directory / "meta.json").write_text('{"source": "vitaldb"}')
    return directory


def test_publish_uploads_every_file_then_the_upload_data_manifest(tmp_path):
    data = _dataset(tmp_path / "vitaldb-m1")
    message = publish(data, f"file://{tmp_path / 'store'}")
    stored = tmp_path / "store"
    assert json.loads((stored / "manifest.json").read_text()) == build_manifest(data, data.name)
    assert (stored / "windows.npy").read_bytes() == b"w" * 1000
    assert message.startswith("published 2 files")


def test_publishing_the_same_dataset_again_sends_nothing(tmp_path):
    data = _dataset(tmp_path / "vitaldb-m1")
    publish(data, f"file://{tmp_path / 'store'}")
    before = (tmp_path / "store" / "windows.npy").stat().st_mtime_ns
    assert "already holds dataset vitaldb-m1" in publish(data, f"file://{tmp_path / 'store'}")
    assert (tmp_path / "store" / "windows.npy").stat().st_mtime_ns == before
