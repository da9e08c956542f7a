"""The open dataset over HTTP (`--source-url`, https://api.vitaldb.net by default).

`<url>/labs` and `<url>/trks` are the lab results and the track list (CSV, served
gzipped); `<url>/<version>/<caseid>.vital` is a case's packed `.vital` file, the path
`vitaldb.load_case` reads. Files are fetched whole into a temp name and renamed once
complete (a short body is retried), so a killed preparation never finds half a file.
"""

from __future__ import annotations

import http.client
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

ATTEMPTS = 4
RETRY_FIRST_WAIT_SECONDS = 2.0  # doubled after each failed attempt
TIMEOUT_SECONDS = 60.0
CHUNK_BYTES = 1 << 20
USER_AGENT = "glucose-training prepare-vitaldb"
PERMANENT_HTTP_CODES = (400, 401, 403, 404, 410)


class DownloadError(Exception):
    """The file could not be fetched (after retries, or for good: e.g. HTTP 404)."""


def dataset_version() -> str:
    """The open dataset's file version that the `vitaldb` package reads."""
    from vitaldb.dataset import DATASET_VERSION

    return DATASET_VERSION


def case_url(source_url: str, case_id: int) -> str:
    return f"{source_url.rstrip('/')}/{dataset_version()}/{case_id}.vital"


def table_url(source_url: str, table: str) -> str:
    return f"{source_url.rstrip('/')}/{table}"


def _fetch_once(url: str, path: Path) -> None:
    partial = path.with_name(f".{path.name}.part-{os.getpid()}")
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            expected = response.headers.get("Content-Length")
            received = 0
            with partial.open("wb") as handle:
                while chunk := response.read(CHUNK_BYTES):
                    handle.write(chunk)
                    received += len(chunk)
        if expected is not None and received != int(expected):
            raise http.client.IncompleteRead(b"", int(expected) - received)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def download(url: str, path: Path) -> None:
    """Fetch `url` into `path`, retrying what may pass (timeouts, resets, 5xx)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    wait = RETRY_FIRST_WAIT_SECONDS
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _fetch_once(url, path)
            return
        except urllib.error.HTTPError as error:
            if error.code in PERMANENT_HTTP_CODES:
                raise DownloadError(f"{url}: HTTP {error.code}") from None
            problem = f"HTTP {error.code}"
        # URLError, timeouts and resets are OSErrors; a short body an HTTPException.
        except (http.client.HTTPException, OSError) as error:
            problem = str(getattr(error, "reason", error)) or type(error).__name__
        if attempt == ATTEMPTS:
            raise DownloadError(f"{url}: {problem} ({ATTEMPTS} attempts)")
        time.sleep(wait)
        wait *= 2
