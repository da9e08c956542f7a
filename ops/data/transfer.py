"""Moving data between this machine and the stack's storage, through `trainer.storage`.

Upload: a dataset directory to `<storageUri>/datasets/<name>/`, manifest last.
Download: a run's mirror `<storageUri>/runs/<run_id>/` to a local directory, resumable
and verified file by file (CHECKS): checkpoints against their `.sha256` sidecars, other
files against the box's own copy when the box answers, the rest against the store's
listing. A file counts as already here only when the store says so now: a local copy is
never trusted for a pointer (LATEST, BEST) or a status the run has rewritten since. A
local `manifest.json` records what arrived and the version of each object it came from.
Keys are mapped to files by `trainer.storage.local_paths` (the bucket is written by the
box, not by us): a key that would land outside the directory is refused, and one that
cannot be brought here verified (damaged, colliding with another key's path, an empty
sidecar) is named and skipped; the rest still come.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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

from ops.terminal_text import markup_safe, printable
from stack.storage_layout import DATASETS_PREFIX
from trainer.checkpoints.layout import HASH_SUFFIX, parse_hash_line
from trainer.config import UserError
from trainer.data.dataset import load_dataset
from trainer.data.manifest import MANIFEST, build_manifest, sha256_file

LOCAL_MANIFEST = "manifest.json"
KEY_CHARACTERS = 200
"""Of a key a line names: the bucket's text, whole up to here."""

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
        said = printable(", ".join(missing), 400)
        raise Exit(f"upload to {uri} incomplete: {said} missing; run it again")
    store.write_bytes(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


CHECKS = ("sidecar", "box", "listing")
"""What may vouch for a downloaded file, strongest first: the sha256 in its checkpoint's
`.sha256` sidecar, the sha256 of the box's own copy, or the store's listing (the size and
version of the object the file was fetched as: the store's copy, as it is now)."""
# A sha256sum line is ~100 bytes: anything much bigger is no sidecar of ours, and is
# not read into memory to find out.
SIDECAR_MAX_BYTES = 1024


def require_dataset(data_uri: str, storage_uri: str) -> None:
    """Exit unless `data_uri` holds a dataset (its manifest, which is written last),
    naming the datasets `storage_uri` does hold: a typo found before any image work."""
    from trainer.storage import StorageError

    try:
        if _store(data_uri).exists(MANIFEST):
            return
        keys = _store(f"{storage_uri}/{DATASETS_PREFIX}").list()
    except StorageError as error:
        raise Exit(f"cannot read {data_uri}: {printable(error, 400)}") from None
    names = sorted(key.split("/")[0] for key in keys if key.endswith(f"/{MANIFEST}"))
    listed = printable(", ".join(names), 400)  # the bucket's keys
    there = f"datasets there: {listed}" if names else "no datasets there yet"
    raise Exit(
        f"no dataset at {data_uri} (no {MANIFEST}; {there}); upload one with `fab "
        "upload-data --data DIR` or prepare one on the box with `fab prepare-data`"
    )


@dataclass
class DownloadReport:
    """What `download_run` did with every stored key."""

    directory: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Already here, as the check that vouches for it expects."""
    verified: dict[str, list[str]] = field(default_factory=lambda: {check: [] for check in CHECKS})
    """Keys here and checked, under the check that vouched for each (CHECKS)."""
    unverified: dict[str, str] = field(default_factory=dict)
    """Keys here that nothing vouches for: why."""
    failed: dict[str, str] = field(default_factory=dict)
    """Keys not brought here (damaged, colliding with another key's path, gone, a
    sidecar that is no sha256 record): why."""
    box_only: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Keys that would have been written outside `directory` (see local_paths)."""


class _Mismatch(Exception):
    """A fetched file's sha256 is not the one its check expects."""


def _load_local_manifest(directory: Path) -> dict:
    path = directory / LOCAL_MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {"files": {}}


def download_run(uri: str, directory: Path, box_hashes: dict[str, str]) -> DownloadReport:
    """Fetch every object under `uri` into `directory`, verified; resumable per file. A
    key that cannot be brought here verified is named and skipped, never the end."""
    store = _store(uri)
    listing = {key: info for key, info in store.list_info().items() if key != LOCAL_MANIFEST}
    if not listing:
        raise Exit(f"nothing stored at {uri}; check the run id with `fab status`")
    directory.mkdir(parents=True, exist_ok=True)
    download = _RunDownload(store, uri, listing, directory, box_hashes)
    with _progress() as progress:
        for key in sorted(listing):
            download.fetch(key, progress)
    download.report.box_only = sorted(set(box_hashes) - set(listing))
    return download.report


class _RunDownload:
    """One `download_run`: the store and its listing, what is already here, and what
    happened to each key."""

    def __init__(self, store, uri: str, listing: dict, directory: Path, box_hashes: dict):
        self.store, self.uri, self.listing, self.directory = store, uri, listing, directory
        self.box_hashes = box_hashes
        self.manifest = _load_local_manifest(directory)
        self.manifest["source"] = uri
        self.report = DownloadReport(directory=directory)
        self._sidecars: dict[str, str | None] = {}

    def fetch(self, key: str, progress: Progress) -> None:
        from trainer.storage import ObjectNotFound
        from trainer.storage.local_paths import UnsafeKey, key_problem, local_path

        try:
            path = local_path(self.directory, key)
        except UnsafeKey:
            why = key_problem(key) or f"it resolves outside {self.directory}"
            console.print(
                f"[red]{markup_safe(self.uri)}: refused object key '{markup_safe(key)}': "
                f"{markup_safe(why)}; not written[/]"
            )
            self.report.refused.append(key)
            return
        if self._is_sidecar(key) and self._sidecar(key) is None:
            self._fail(key, "it is no sha256 record (empty, torn or not ours)")
            return
        expected, how, doubt = self._expected(key)
        try:
            local_sha256 = self._here(key, path, expected)
            if local_sha256:
                self._record(key, local_sha256, path)
                self.report.skipped.append(key)
            else:
                doubt = self._get(key, path, expected, how, progress) or doubt
                self.report.fetched.append(key)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            self._fail(key, f"it collides with another key's file or directory at {path}")
            return
        except OSError as error:  # a key this file system cannot hold (a name too long)
            self._fail(key, f"it cannot be written here: {error.strerror or error}")
            return
        except ObjectNotFound:
            self._fail(key, "it was deleted from the store after the listing (pruned by the run?)")
            return
        except _Mismatch as error:
            self._fail(key, str(error))
            return
        if doubt:
            console.print(f"[yellow]{markup_safe(key)}: not verified: {markup_safe(doubt)}[/]")
            self.report.unverified[key] = doubt
        else:
            self.report.verified[how].append(key)

    def _is_sidecar(self, key: str) -> bool:
        return key.endswith(HASH_SUFFIX) and key.removesuffix(HASH_SUFFIX) in self.listing

    def _sidecar(self, key: str) -> str | None:
        """The sha256 a sidecar key records, or None when it records none."""
        from trainer.storage import StorageError

        if key not in self._sidecars:
            self._sidecars[key] = None
            # UnicodeDecodeError is a ValueError too.
            with contextlib.suppress(ValueError, StorageError):
                if self.listing[key].size <= SIDECAR_MAX_BYTES:
                    self._sidecars[key] = parse_hash_line(self.store.read_bytes(key).decode())
        return self._sidecars[key]

    def _expected(self, key: str) -> tuple[str | None, str, str]:
        """(the sha256 the file must have, the check that says so, a doubt); the sha256
        is None for the listing, which vouches by size and version instead."""
        doubt = ""
        if key + HASH_SUFFIX in self.listing:
            digest = self._sidecar(key + HASH_SUFFIX)
            if digest is not None:
                return digest, "sidecar", ""
            doubt = f"its sidecar {key + HASH_SUFFIX} is no sha256 record"
        if key in self.box_hashes:
            return self.box_hashes[key], "box", ""
        return None, "listing", doubt

    def _here(self, key: str, path: Path, expected: str | None) -> str | None:
        """The local file's sha256 when it is what the check expects, else None. For the
        listing's check the manifest vouches only together with the object's version."""
        if not path.is_file():
            return None
        if expected is not None:
            return expected if sha256_file(path) == expected else None
        entry, listed = self.manifest["files"].get(key) or {}, self.listing[key]
        if entry.get("version") != listed.version or not (
            entry.get("bytes") == listed.size == path.stat().st_size
        ):
            return None
        return entry["sha256"] if sha256_file(path) == entry.get("sha256") else None

    def _get(self, key: str, path: Path, expected, how: str, progress: Progress) -> str:
        """Fetch `key` to `path` through a partial file; a doubt, or "" when none."""
        # A name near the file system's 255-byte limit has no room for the suffix.
        partial = path.with_name(f".{hashlib.sha256(path.name.encode()).hexdigest()[:16]}.part")
        bar = progress.add_task(markup_safe(key, KEY_CHARACTERS), total=None)
        try:
            self.store.get_file(key, partial, lambda n: progress.advance(bar, n))
            actual = sha256_file(partial)
            if expected is not None and actual != expected:
                raise _Mismatch(
                    f"sha256 {actual[:12]} != {how}'s {expected[:12]}: the stored copy is "
                    "damaged or still being written"
                )
            partial.replace(path)
        finally:
            progress.remove_task(bar)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                partial.unlink()
        if not self._record(key, actual, path):
            return "it changed in the store while it was downloaded"
        return ""

    def _record(self, key: str, sha256: str, path: Path) -> bool:
        """Enter the file in the manifest with the version of the object it is; False
        when its size is not the listed one (the object was written again meanwhile)."""
        size, listed = path.stat().st_size, self.listing[key]
        version = listed.version if size == listed.size else ""
        entry = {"sha256": sha256, "bytes": size, "version": version}
        if self.manifest["files"].get(key) != entry:
            self.manifest["files"][key] = entry
            _write_manifest(self.directory, self.manifest)
        return bool(version)

    def _fail(self, key: str, why: str) -> None:
        where = f"{markup_safe(self.uri)}/{markup_safe(key)}"
        console.print(f"[red]{where}: not downloaded: {markup_safe(why)}[/]")
        self.report.failed[key] = why
        # A file an earlier download left here is no longer the store's copy.
        if self.manifest["files"].pop(key, None) is not None:
            _write_manifest(self.directory, self.manifest)


def _write_manifest(directory: Path, manifest: dict) -> None:
    path = directory / LOCAL_MANIFEST
    partial = path.with_name(f".{LOCAL_MANIFEST}.tmp")
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    partial.replace(path)
