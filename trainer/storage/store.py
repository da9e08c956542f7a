"""What every backend shares: the `ObjectStore` protocol, its errors, URI parsing and
the transfer settings. The backends import this, never the package: it is the
package (`open_store`) that imports them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

# A progress callback receives the number of bytes moved since its previous call,
# the convention of boto3's Callback and of rich/tqdm `advance`.
Progress = Callable[[int], None]

PART_SIZE_BYTES = 8 * 1024 * 1024
# Above this a transfer is split into parallel parts, the size from which AWS advises
# them (https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html).
# Below it, one request: an 87 MB ResNet34-1D checkpoint as 11 parts cost the
# trainer's CPU twice that of one PUT (0.18 vs 0.09 s, boto3 against moto), on a box
# where uploads share the cores with training; one stream still moves it in seconds.
MULTIPART_THRESHOLD_BYTES = 100 * 1024 * 1024
TRANSFER_THREADS = 8
CONNECT_TIMEOUT_SECONDS = 10
READ_TIMEOUT_SECONDS = 60
# The SDKs retry a little themselves; `trainer.checkpoints.sync` owns the long retry loop, so a
# dead endpoint must fail fast rather than hold the uploader for minutes.
SDK_RETRY_ATTEMPTS = 3
FILE_COPY_CHUNK_BYTES = 4 * 1024 * 1024


# The variables the storage SDKs read (boto3: AWS_*; azure-identity and our
# connection-string path: AZURE_*). A container that only moves data gets these of
# a target's `containerEnv` and nothing else.
STORAGE_ENV_PREFIXES = ("AWS_", "AZURE_")


def storage_environment(env: dict[str, str]) -> dict[str, str]:
    """The part of `env` a storage client reads."""
    return {name: value for name, value in env.items() if name.startswith(STORAGE_ENV_PREFIXES)}


class StorageError(Exception):
    """A storage problem worth one line to the user."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """The key does not exist in the store."""


class InvalidStorageUri(StorageError, ValueError):
    """The URI is not one of the supported forms."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a store's listing says of one object: enough to tell it from a rewrite."""

    size: int
    version: str
    """Changes whenever the object is written again: S3's and Blob's ETag; for a file,
    its inode and modification time (a rewrite is a new file renamed over the old)."""


class ObjectStore(Protocol):
    """What every backend offers; keys are relative to the store's URI."""

    uri: str

    def put_file(self, key: str, path: Path, progress: Progress | None = None) -> None: ...
    def get_file(self, key: str, path: Path, progress: Progress | None = None) -> None: ...
    def read_bytes(self, key: str) -> bytes: ...
    def read_range(self, key: str, start: int, length: int) -> bytes:
        """At most `length` bytes of the object from byte `start` (fewer at its end, none
        past it): a part of an object too big to hold, in one request."""
        ...

    def write_bytes(self, key: str, data: bytes) -> None: ...
    def list(self, prefix: str = "") -> list[str]: ...
    def list_info(self, prefix: str = "") -> dict[str, ObjectInfo]: ...
    def delete(self, key: str) -> None: ...
    def exists(self, key: str) -> bool: ...


@dataclass(frozen=True)
class StoreLocation:
    """A parsed storage URI: `container` is the bucket (s3) or container (az)."""

    scheme: str
    account: str
    container: str
    prefix: str
    path: str

    def __post_init__(self) -> None:
        if self.scheme not in ("file", "s3", "az"):
            raise InvalidStorageUri(f"unsupported scheme {self.scheme!r}")


_URI_FORMS = "file:///abs/path, s3://BUCKET[/PREFIX] or az://ACCOUNT/CONTAINER[/PREFIX]"


def parse_uri(uri: str) -> StoreLocation:
    """Split a storage URI into its parts, or say which form was expected."""
    parsed = urlparse(uri)
    bad = InvalidStorageUri(f"storage URI {uri!r} is not supported: expected {_URI_FORMS}")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise bad
        return StoreLocation("file", "", "", "", parsed.path.rstrip("/") or "/")
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise bad
        return StoreLocation("s3", "", parsed.netloc, parsed.path.strip("/"), "")
    if parsed.scheme == "az":
        container, _, prefix = parsed.path.strip("/").partition("/")
        if not parsed.netloc or not container:
            raise bad
        return StoreLocation("az", parsed.netloc, container, prefix.strip("/"), "")
    raise bad


def join_uri(base: str, *parts: str) -> str:
    """`join_uri("s3://b/p", "runs", run_id)` -> `s3://b/p/runs/<run_id>`."""
    tail = "/".join(part.strip("/") for part in parts if part.strip("/"))
    return f"{base.rstrip('/')}/{tail}" if tail else base


def full_key(prefix: str, key: str) -> str:
    """The backend's key for `key` under the URI's prefix."""
    key = key.strip("/")
    return f"{prefix}/{key}" if prefix and key else prefix or key


def relative_key(prefix: str, full: str) -> str:
    """The inverse of `full_key`."""
    return full[len(prefix) + 1 :] if prefix else full
