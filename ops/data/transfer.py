"""Moving data between this machine and the stack's storage, through `trainer.storage`.

Upload: a dataset directory to `<storageUri>/datasets/<name>/`, manifest last.
Download: a run's mirror `<storageUri>/runs/<run_id>/` to a local directory,
resumable (files already here with the recorded hash are skipped) and verified:
checkpoints against their `.sha256` sidecars, every other file against the box's
own copy when the box is reachable. A local `manifest.json` records what arrived.
Keys are mapped to files by `trainer.storage.local_paths` (the bucket is written by
the box, not by us): a key that would land outside the directory is refused,
reported and never written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from stack.storage_layout import DATASETS_PREFIX
from trainer.config import UserError
from trainer.data.dataset import load_dataset
from trainer.data.manifest import MANIFEST, build_manifest, sha256_file

SIDECAR_SUFFIX = ".sha256"
LOCAL_MANIFEST = "manifest.json"

console = Console(stderr=True, soft_wrap=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _store(uri: str):
    from trainer.storage import StorageError, open_store

    try:
        return open_store(uri)
    except StorageError as error:
        raise Exit(f"cannot open storage: {error}") from None


def upload_dataset(data_dir: Path, uri: str) -> dict:
    """Upload every file of `data_dir` to `uri`, then the manifest; returns the manifest.
    The directory is first checked as the trainer checks its --data: a set it would
    refuse is refused here, before a byte travels."""
    try:
        load_dataset(data_dir)
    except UserError as error:
        raise Exit(f"{error} (the trainer's check; nothing uploaded)") from None
    try:
        manifest = build_manifest(data_dir, data_dir.name)
    except UserError as error:  # a symlink out of the directory
        raise Exit(str(error)) from None
    store = _store(uri)
    if store.exists(MANIFEST) and json.loads(store.read_bytes(MANIFEST)) == manifest:
        console.print(f"{uri} already holds this dataset (same sha256 for every file)")
        return manifest
    total = sum(entry["bytes"] for entry in manifest["files"].values())
    with _progress() as progress:
        bar = progress.add_task(f"upload {data_dir.name}", total=total)
        for file_name in manifest["files"]:
            store.put_file(file_name, data_dir / file_name, lambda n: progress.advance(bar, n))
    missing = sorted(set(manifest["files"]) - set(store.list()))
    if missing:
        raise Exit(f"upload to {uri} incomplete: {', '.join(missing)} missing; run it again")
    store.write_bytes(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def require_dataset(data_uri: str, storage_uri: str) -> None:
    """Exit unless `data_uri` holds a dataset (its manifest, which is written last),
    naming the datasets `storage_uri` does hold: a typo found before any image work."""
    from trainer.storage import StorageError

    try:
        if _store(data_uri).exists(MANIFEST):
            return
        keys = _store(f"{storage_uri}/{DATASETS_PREFIX}").list()
    except StorageError as error:
        raise Exit(f"cannot read {data_uri}: {error}") from None
    names = sorted(key.split("/")[0] for key in keys if key.endswith(f"/{MANIFEST}"))
    there = f"datasets there: {', '.join(names)}" if names else "no datasets there yet"
    raise Exit(
        f"no dataset at {data_uri} (no {MANIFEST}; {there}); upload one with `fab "
        "upload-data --data DIR` or prepare one on the box with `fab prepare-data`"
    )


@dataclass
class DownloadReport:
    """What `download_run` did; `unverified` files had neither a sidecar nor a box copy."""

    directory: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    verified_by_sidecar: list[str] = field(default_factory=list)
    verified_by_box: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    box_only: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Keys that would have been written outside `directory` (see local_paths)."""


def _load_local_manifest(directory: Path) -> dict:
    path = directory / LOCAL_MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {"files": {}}


def _already_here(path: Path, entry: dict | None) -> bool:
    return (
        entry is not None
        and path.is_file()
        and path.stat().st_size == entry["bytes"]
        and sha256_file(path) == entry["sha256"]
    )


def download_run(uri: str, directory: Path, box_hashes: dict[str, str]) -> DownloadReport:
    """Fetch every object under `uri` into `directory`, verified; resumable per file."""
    store = _store(uri)
    keys = [key for key in store.list() if key != LOCAL_MANIFEST]
    if not keys:
        raise Exit(f"nothing stored at {uri}; check the run id with `fab status`")
    directory.mkdir(parents=True, exist_ok=True)
    download = _RunDownload(store, uri, set(keys), directory, box_hashes)
    with _progress() as progress:
        for key in keys:
            download.fetch(key, progress)
    download.report.box_only = sorted(set(box_hashes) - set(keys))
    return download.report


class _RunDownload:
    """One `download_run`: the store, what is already here, and what happened."""

    def __init__(self, store, uri: str, keys: set[str], directory: Path, box_hashes: dict):
        self.store, self.uri, self.keys, self.directory = store, uri, keys, directory
        self.box_hashes = box_hashes
        self.manifest = _load_local_manifest(directory)
        self.manifest["source"] = uri
        self.report = DownloadReport(directory=directory)

    def _expected(self, key: str) -> tuple[str | None, str | None]:
        """(sha256, how we know it) the file must have, or (None, None) when nothing says."""
        if key + SIDECAR_SUFFIX in self.keys:
            return self.store.read_bytes(key + SIDECAR_SUFFIX).decode().split()[0], "sidecar"
        if key in self.box_hashes:
            return self.box_hashes[key], "box"
        return None, None

    def fetch(self, key: str, progress: Progress) -> None:
        from trainer.storage.local_paths import UnsafeKey, local_path

        try:
            path = local_path(self.directory, key)
        except UnsafeKey as error:
            console.print(f"[red]{self.uri}: {error}; not written[/]")
            self.report.refused.append(key)
            return
        expected, how = self._expected(key)
        entry = self.manifest["files"].get(key)
        if _already_here(path, entry) and expected in (None, entry["sha256"]):
            self.report.skipped.append(key)
        else:
            self._get_verified(key, path, expected, how, progress)
            self.report.fetched.append(key)
        verified = {"sidecar": self.report.verified_by_sidecar, "box": self.report.verified_by_box}
        verified.get(how, self.report.unverified).append(key)

    def _get_verified(self, key: str, path: Path, expected, how, progress: Progress) -> None:
        partial = path.with_name(f".{path.name}.part")
        bar = progress.add_task(key, total=None)
        self.store.get_file(key, partial, lambda n: progress.advance(bar, n))
        progress.remove_task(bar)
        actual = sha256_file(partial)
        if expected is not None and actual != expected:
            partial.unlink()
            raise Exit(
                f"{self.uri}/{key}: sha256 {actual[:12]} != {how}'s {expected[:12]}; "
                "the stored copy is damaged or still being written; retry after `fab stop`"
            )
        partial.replace(path)
        self.manifest["files"][key] = {"sha256": actual, "bytes": path.stat().st_size}
        _write_manifest(self.directory, self.manifest)


def _write_manifest(directory: Path, manifest: dict) -> None:
    path = directory / LOCAL_MANIFEST
    partial = path.with_name(f".{LOCAL_MANIFEST}.tmp")
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    partial.replace(path)


def parse_sha256sum(lines: Iterable[str]) -> dict[str, str]:
    """`sha256sum` output (`HASH  ./path`) as {relative path: hash}."""
    hashes = {}
    for line in lines:
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            hashes[name.removeprefix("./")] = digest
    return hashes
