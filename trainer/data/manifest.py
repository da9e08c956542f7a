"""manifest.json of a dataset in storage: sha256 and size of every file.

Torch-free and standard library only besides `trainer.storage`: `fab upload-data` and
`fab download` use it on the user's machine, and on the box the image runs it as
`python -m trainer dataset-fetch URI DEST` (what `fab train` caches a dataset with) and
`python -m trainer dataset-publish DIR URI` (what `fab prepare-data` uploads with), so
the box verifies exactly as the laptop does. The manifest is written last on upload,
so its presence means the dataset is complete. It comes from the bucket, so its file
names go through `trainer.storage.local_paths` before any is read or written: a
manifest naming a file outside the destination is refused as a whole.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainer.config import UserError
from trainer.container_env import host_path

MANIFEST = "manifest.json"
HASH_CHUNK_BYTES = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(data_dir: Path, name: str) -> dict:
    """The manifest of every regular file in `data_dir` (the manifest itself excluded);
    UserError for a symlink out of it: a dataset someone handed you could point at
    your keys, and an upload would publish whatever it reads."""
    root = Path(data_dir).resolve()
    for path in sorted(data_dir.iterdir()):
        if path.is_symlink() and root not in path.resolve().parents:
            raise UserError(
                f"{path} is a symlink to {path.resolve()}, outside {data_dir}; refusing to "
                "upload it: copy the file into the dataset directory (`cp -L`) if you mean it"
            )
    files = {
        path.name: {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for path in sorted(data_dir.iterdir())
        if path.is_file() and path.name != MANIFEST and not path.name.startswith(".")
    }
    return {"name": name, "files": files}


def matches(directory: Path, manifest: dict) -> bool:
    """Whether `directory` already holds every file of `manifest` with its hash."""
    for file_name, entry in manifest["files"].items():
        path = directory / file_name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            return False
        if sha256_file(path) != entry["sha256"]:
            return False
    return True


def checked_manifest(uri: str, text: bytes, destination: Path) -> dict:
    """The manifest, if every file name maps into `destination` and every entry is a
    sha256 and a size; SystemExit with one line otherwise."""
    from trainer.storage.local_paths import UnsafeKey, local_path

    try:
        manifest = json.loads(text)
        files = manifest["files"]
        for file_name, entry in files.items():
            local_path(destination, file_name)
            if not (isinstance(entry["sha256"], str) and isinstance(entry["bytes"], int)):
                raise TypeError(f"{file_name}: expected a sha256 string and a byte count")
    except UnsafeKey as error:
        raise UserError(f"{uri}/{MANIFEST}: {error}; the dataset is not fetched") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{uri}/{MANIFEST} is not a dataset manifest ({error!r})") from None
    return manifest


def fetch(uri: str, destination: Path) -> str:
    """Fetch the dataset at `uri` into `destination` unless already there; verify it."""
    from trainer.storage import open_store
    from trainer.storage.local_paths import local_path

    store = open_store(uri)
    destination.mkdir(parents=True, exist_ok=True)
    manifest = checked_manifest(uri, store.read_bytes(MANIFEST), destination)
    if matches(destination, manifest):
        return f"dataset {manifest.get('name')} already cached in {host_path(destination)}"
    for file_name, entry in manifest["files"].items():
        path = local_path(destination, file_name)
        if path.is_file() and sha256_file(path) == entry["sha256"]:
            continue
        partial = path.with_name(f".{path.name}.part")
        store.get_file(file_name, partial)
        actual = sha256_file(partial)
        if actual != entry["sha256"]:
            partial.unlink()
            raise UserError(f"{uri}/{file_name}: sha256 {actual[:12]} != manifest's")
        partial.replace(path)
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    into = host_path(destination)
    return f"dataset {manifest.get('name')} fetched from {uri} into {into}, sha256 verified"


def publish(directory: Path, uri: str) -> str:
    """Upload every file of `directory` to `uri`, the manifest last (what `fab
    upload-data` writes); `fab prepare-data` runs it on the box, next to the data."""
    from trainer.storage import open_store

    manifest = build_manifest(directory, directory.name)
    store = open_store(uri)
    if store.exists(MANIFEST) and json.loads(store.read_bytes(MANIFEST)) == manifest:
        return f"{uri} already holds dataset {manifest['name']} (same sha256 for every file)"
    for file_name in manifest["files"]:
        store.put_file(file_name, directory / file_name)
    store.write_bytes(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    total_mb = sum(entry["bytes"] for entry in manifest["files"].values()) / 1e6
    return f"published {len(manifest['files'])} files ({total_mb:.1f} MB) to {uri}"
