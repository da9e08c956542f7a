"""The `az://ACCOUNT/CONTAINER[/PREFIX]` backend through azure-storage-blob."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainer.storage.store import (
    CONNECT_TIMEOUT_SECONDS,
    MULTIPART_THRESHOLD_BYTES,
    PART_SIZE_BYTES,
    READ_TIMEOUT_SECONDS,
    SDK_RETRY_ATTEMPTS,
    TRANSFER_THREADS,
    ObjectInfo,
    ObjectNotFound,
    Progress,
    StorageError,
    StoreLocation,
    full_key,
    relative_key,
)


class BlobStore:
    """Azure Blob through azure-storage-blob: block uploads in parallel."""

    def __init__(self, uri: str, location: StoreLocation) -> None:
        from azure.storage.blob import BlobServiceClient

        self.uri = uri
        self.prefix = location.prefix
        # azure-core logs every request's headers at INFO; a trainer logging at INFO
        # would drown its own lines in them.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(
            logging.WARNING
        )
        options = {
            "connection_timeout": CONNECT_TIMEOUT_SECONDS,
            "read_timeout": READ_TIMEOUT_SECONDS,
            "retry_total": SDK_RETRY_ATTEMPTS,
            # The SDK's default backoff (15 s, then +3^n) would hold a dead endpoint
            # for a minute per call; `trainer.checkpoints.sync` owns the long retry loop.
            "initial_backoff": 1,
            "increment_base": 2,
            "random_jitter_range": 1,
            "max_single_put_size": MULTIPART_THRESHOLD_BYTES,
            "max_block_size": PART_SIZE_BYTES,
            "max_single_get_size": MULTIPART_THRESHOLD_BYTES,
            "max_chunk_get_size": PART_SIZE_BYTES,
        }
        connection_string = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if connection_string:
            _check_connection_string_account(connection_string, location.account)
            service = BlobServiceClient.from_connection_string(connection_string, **options)
        else:
            from azure.identity import DefaultAzureCredential

            service = BlobServiceClient(
                f"https://{location.account}.blob.core.windows.net",
                credential=DefaultAzureCredential(),
                **options,
            )
        self._container = service.get_container_client(location.container)

    def _blob(self, key: str):
        return self._container.get_blob_client(full_key(self.prefix, key))

    def put_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        with open(path, "rb") as data:
            self._blob(key).upload_blob(
                data,
                overwrite=True,
                max_concurrency=TRANSFER_THREADS,
                progress_hook=_progress_from_totals(progress),
            )

    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                stream = self._blob(key).download_blob(
                    max_concurrency=TRANSFER_THREADS,
                    progress_hook=_progress_from_totals(progress),
                )
                stream.readinto(out)
            os.replace(tmp, path)
        except ResourceNotFoundError:
            raise ObjectNotFound(f"{self.uri}: no object {key!r}") from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def read_bytes(self, key: str) -> bytes:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._blob(key).download_blob().readall()
        except ResourceNotFoundError:
            raise ObjectNotFound(f"{self.uri}: no object {key!r}") from None

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """One ranged Get Blob (`x-ms-range`, https://learn.microsoft.com/en-us/rest/api/
        storageservices/specifying-the-range-header-for-blob-service-operations); a start
        past the end is the service's 416: no bytes."""
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        if length <= 0:
            return b""
        try:
            return self._blob(key).download_blob(offset=start, length=length).readall()
        except ResourceNotFoundError:
            raise ObjectNotFound(f"{self.uri}: no object {key!r}") from None
        except HttpResponseError as error:
            if error.status_code == 416:
                return b""
            raise

    def write_bytes(self, key: str, data: bytes) -> None:
        self._blob(key).upload_blob(data, overwrite=True)

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.list_info(prefix))

    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]:
        full = (
            full_key(self.prefix, prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        )
        return {
            relative_key(self.prefix, blob.name): ObjectInfo(blob.size, blob.etag)
            for blob in self._container.list_blobs(name_starts_with=full)
        }

    def delete(self, key: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        with contextlib.suppress(ResourceNotFoundError):
            self._blob(key).delete_blob()

    def exists(self, key: str) -> bool:
        return self._blob(key).exists()


def _check_connection_string_account(connection_string: str, account: str) -> None:
    """A key for one account must not silently write into another account's URI."""
    fields = dict(part.split("=", 1) for part in connection_string.split(";") if "=" in part)
    named = fields.get("AccountName")
    if named and named != account:
        raise StorageError(
            f"AZURE_STORAGE_CONNECTION_STRING is for account {named!r} but the URI names "
            f"{account!r}: use az://{named}/... or unset the variable to sign in as yourself"
        )


def _progress_from_totals(progress: Progress | None) -> Callable[[int, int | None], None] | None:
    """Adapt a cumulative (current, total) hook, as the Azure SDK calls it."""
    if progress is None:
        return None
    done = [0]

    def hook(current: int, _total: int | None) -> None:
        progress(current - done[0])
        done[0] = current

    return hook
