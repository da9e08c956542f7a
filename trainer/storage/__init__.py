"""One object-store client for `file://`, `s3://` and `az://` URIs.

The trainer syncs checkpoints and run files through it and `ops` reuses it for
`fab download` / `upload-data`, so it stays torch-free and imports each cloud SDK
only when a URI of that cloud is opened: a missing SDK never breaks the other cloud.

URI forms (ARCHITECTURE.md, "Storage URIs"):

- ``file:///abs/path``
- ``s3://BUCKET[/PREFIX]``: boto3's default credential chain (the instance role on
  the box); boto3 itself honours ``AWS_ENDPOINT_URL`` (moto in tests).
- ``az://ACCOUNT/CONTAINER[/PREFIX]``: ``https://ACCOUNT.blob.core.windows.net`` with
  ``DefaultAzureCredential`` (managed identity on the VM, ``az login`` on a laptop);
  when ``AZURE_STORAGE_CONNECTION_STRING`` is set it supplies endpoint and key instead
  (Azurite in tests).

Keys are ``/``-separated paths relative to the URI. A single-object write is atomic
on all three backends (S3 and Blob commit a PUT or a multipart/block upload as one
object; the file backend writes a temp file and renames it), which is what lets
`trainer.checkpoints.sync` publish a checkpoint before the pointer that names it.
"""

from __future__ import annotations

from pathlib import Path

from trainer.storage.store import (
    InvalidStorageUri,
    ObjectNotFound,
    ObjectStore,
    StorageError,
    join_uri,
    parse_uri,
    storage_environment,
)

__all__ = [
    "InvalidStorageUri",
    "ObjectNotFound",
    "ObjectStore",
    "StorageError",
    "join_uri",
    "open_store",
    "parse_uri",
    "storage_environment",
]


def open_store(uri: str) -> ObjectStore:
    """Open the store a URI names; raises InvalidStorageUri for an unknown form."""
    location = parse_uri(uri)
    # Each backend is imported only when its scheme is used: no SDK import at
    # start-up, and a missing azure SDK never breaks an s3:// run (or the reverse).
    if location.scheme == "file":
        from trainer.storage.local import FileStore

        return FileStore(uri, Path(location.path))
    if location.scheme == "s3":
        from trainer.storage.s3 import S3Store

        return S3Store(uri, location)
    from trainer.storage.blob import BlobStore

    return BlobStore(uri, location)
