"""One blob PUT to a storage account that refuses shared keys, with an Azure AD token.

azure-native's Blob resource uploads with the account's key
(https://github.com/pulumi/pulumi-azure-native/issues/2015), which the stack's account
refuses (`allowSharedKeyAccess: false`), so `pulumi up` uploads the box programs
through this instead (pulumi/infra/azure/box_programs.py). A role assignment made in
the same `pulumi up` takes minutes to reach the data plane: a 403 is retried for
`wait_seconds`. Standard library only; the caller brings the token.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

BLOB_API_VERSION = "2021-08-06"
AUTH_WAIT_SECONDS = 10 * 60
RETRY_SECONDS = 15
HTTP_TIMEOUT_SECONDS = 60
STORAGE_SCOPE = "https://storage.azure.com/.default"


class BlobUploadError(Exception):
    """The blob service refused the upload (or never answered); the message says how."""


def blob_endpoint(account: str) -> str:
    return f"https://{account}.blob.core.windows.net"


def put_blob(
    endpoint: str,
    container: str,
    key: str,
    data: bytes,
    token: Callable[[], str],
    *,
    wait_seconds: float = AUTH_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Upload `data` as block blob `key`; `token()` gives a bearer token for Storage."""
    url = f"{endpoint.rstrip('/')}/{container}/{urllib.parse.quote(key)}"
    deadline = time.monotonic() + wait_seconds
    while True:
        request = urllib.request.Request(
            url,
            data=data,
            method="PUT",
            headers={
                "Authorization": f"Bearer {token()}",
                "x-ms-version": BLOB_API_VERSION,
                "x-ms-blob-type": "BlockBlob",
                "Content-Type": "application/x-tar",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS):
                return
        except urllib.error.HTTPError as error:
            detail = f"HTTP {error.code} {error.headers.get('x-ms-error-code') or error.reason}"
            if error.code != 403 or time.monotonic() >= deadline:
                raise BlobUploadError(f"uploading {url} failed: {detail}") from None
        except (urllib.error.URLError, OSError) as error:
            raise BlobUploadError(f"uploading {url} failed: {error}") from None
        sleep(RETRY_SECONDS)
