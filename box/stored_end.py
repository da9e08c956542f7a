"""A failed run's end in the stack's storage, where its trainer could not put it.

`fab runs` and `fab tensorboard` learn how a run ended from its folder in storage
(`<storageUri>/runs/<id>/status.json`), and only the trainer uploads there. A trainer
killed before its first upload (exit 137: the kernel's OOM killer, a `docker kill`)
leaves `fab train`'s launch record alone, and the run was listed `launched` for ever
though the box knew it failed. So when the resume unit (box/resume.py) or the end watch
(box/end_watch.py) judges a run failed for good, `store` writes its end there in the
trainer's own status.json shape (trainer.reports.status): the run's last status.json on
the box, with state `failed`, the container's exit code, and when it exited.

Never over an end the trainer stored: the object is read first, one whose state is an
end (contract.END_STATES: stopped, finished, failed...) is kept, and the write is
conditional on what was read (`If-Match` its ETag, or `If-None-Match: *` where there
was none), so an upload in between wins. A run that ended in order (exit 0, 75, 69)
is the trainer's to store and is left alone.

Who writes: AWS the instance role (an S3 PUT signed with box/bootstrap.py's SigV4, keys
from IMDSv2), Azure the managed identity (Blob REST Put Blob with a bearer token from
IMDS); both may write runs/* already, as the trainer in the container uploads with them.
`file://` (the end watch on this machine) is a folder, written in place. A store (keys,
read, write) runs in a child killed at its deadline (box/bounded_write.run_within); one
that failed is tried again at the caller's next look. Logs name the store by its
scheme and host, never a key, a token or an answer's body. Standard library only.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.client
import json
import os
import re
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from box import bootstrap, bounded_post, contract, instance_metadata
from box.bounded_write import run_within
from box.watchdog_config import WatchdogConfig

STORE_SECONDS = 10
"""One end's store: the role's keys or token, the read and the write together."""
ORDERLY_EXITS = (contract.EXIT_FINISHED, contract.EXIT_STOPPED, contract.EXIT_BOXES_AWAY)
"""Exits after which the trainer itself stored how the run stands."""
MAX_STATUS_BYTES = 64 * 1024
"""Of a stored status.json read back; a larger one is no end the trainer wrote."""
BLOB_API_VERSION = bootstrap.BLOB_API_VERSION
STORED = "stored"
KEPT = "kept"
"""The child's reports: the end written, or an end found there and kept."""
CHANGED = "changed meanwhile (an upload?); it is looked at again at the next look"
"""Why a conditional write was refused: 412 (S3, Blob's If-Match), 409 (Blob's
If-None-Match: * over a blob that came meanwhile)."""
S3_ERROR_CODE = re.compile(rb"<Code>([A-Za-z]{1,64})</Code>")


class StoreError(RuntimeError):
    """The store refused or did not answer; the message is fit for a log."""


@dataclasses.dataclass(frozen=True)
class StatusObject:
    """A run's status.json in the stack's storage."""

    scheme: str
    """`s3`, `az` or `file`."""
    url: str
    """The object's https URL; the file's path for `file`."""

    @property
    def shown(self) -> str:
        """What a log says of the store: its scheme and host (a folder for `file`)."""
        if self.scheme == "file":
            return f"file://{Path(self.url).parent}"
        return bounded_post.shown(self.url)


def is_failure(exit_code: int) -> bool:
    """An end the trainer may not have stored: any exit but its orderly ones."""
    return exit_code not in ORDERLY_EXITS


def status_object(config: WatchdogConfig, run_id: str) -> StatusObject | None:
    """Where `run_id`'s status.json is in config.storage_uri (in the run's folder,
    `contract.run_uri`); None where the box knows no storage."""
    if not config.storage_uri:
        return None
    uri = f"{contract.run_uri(config.storage_uri, run_id)}/{contract.STATUS_FILE}"
    parts = urllib.parse.urlsplit(uri)
    where = parts.path.strip("/")
    if parts.scheme == "az":
        container, _, key = where.partition("/")
    else:
        container, key = parts.netloc, where
    if parts.scheme == "file":
        return StatusObject("file", f"/{key}")
    quoted = urllib.parse.quote(key)
    if parts.scheme == "az":
        endpoint = config.storage_endpoint or f"https://{parts.netloc}.blob.core.windows.net"
        return StatusObject("az", f"{endpoint.rstrip('/')}/{container}/{quoted}")
    if config.storage_endpoint:
        return StatusObject("s3", f"{config.storage_endpoint.rstrip('/')}/{container}/{quoted}")
    region = config.storage_region
    return StatusObject("s3", f"https://{container}.s3.{region}.amazonaws.com/{quoted}")


def store(
    config: WatchdogConfig,
    run_id: str,
    record: dict,
    say: Callable[[str], None],
    give_up_at: float | None = None,
) -> bool:
    """Write `record` (a status.json) as `run_id`'s end unless its folder in storage holds
    an end already, by `give_up_at` (time.monotonic(); default STORE_SECONDS from now).
    Whether nothing is left to try. Never raises: a store never holds up a look."""
    where = status_object(config, run_id)
    if where is None:
        return True
    give_up = give_up_at if give_up_at is not None else time.monotonic() + STORE_SECONDS
    seconds = give_up - time.monotonic()
    if seconds <= 0:
        say(f"run {run_id}: no time left to store its end in {where.shown}; at the next look")
        return False
    body = json.dumps(record).encode()
    try:
        child = run_within(lambda report: report(_store(config, where, body)), seconds)
    except OSError as error:  # no child to be had (out of memory, of processes)
        say(f"WARNING: run {run_id}: its end was not stored ({error}); next look")
        return False
    said = child.lines[-1] if child.lines else ""
    if said == STORED:
        ended = f"{record.get('state')}, exit {record.get('exit_code')}"
        say(f"run {run_id}: its end ({ended}) stored in {where.shown}: its trainer stored none")
        return True
    if said.startswith(KEPT):
        return True  # the trainer's own end (or ours, from an earlier look)
    why = child.error or f"no answer within {seconds:.0f} s"
    say(f"WARNING: run {run_id}: its end was not stored in {where.shown} ({why}); next look")
    return False


def _store(config: WatchdogConfig, where: StatusObject, body: bytes) -> str:
    """The child's work: read what is there, write `body` over anything but an end."""
    if where.scheme == "file":
        return _store_file(Path(where.url), body)
    sign = _signer(config, where)
    status, headers, stored = _call("GET", where.url, sign("GET", b""), config)
    if status == 200 and (state := _end_state(stored)):
        return f"{KEPT} {state}"
    if status not in (200, 404):
        raise StoreError(_refused("reading", status, headers, stored))
    # Written only over what was read: a trainer's upload in between is never lost.
    etag = headers.get("etag")
    conditions = {"If-None-Match": "*"} if status == 404 else {"If-Match": etag} if etag else {}
    put = {**sign("PUT", body), **conditions, "Content-Type": "application/json"}
    if where.scheme == "az":
        put["x-ms-blob-type"] = "BlockBlob"
    status, headers, answer = _call("PUT", where.url, put, config, body)
    if status in (409, 412):
        raise StoreError(f"its {contract.STATUS_FILE} {CHANGED}")
    if not 200 <= status < 300:
        raise StoreError(_refused("writing", status, headers, answer))
    return STORED


def _store_file(path: Path, body: bytes) -> str:
    """A `file://` store: the same rule on a folder (a temp file renamed over, as the
    trainer's file store writes)."""
    try:
        if state := _end_state(path.read_bytes()[: MAX_STATUS_BYTES + 1]):
            return f"{KEPT} {state}"
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with open(descriptor, "wb") as handle:
        handle.write(body)
    os.replace(partial, path)
    return STORED


def _end_state(stored: bytes) -> str | None:
    """The state of a stored status.json when it is an end (contract.END_STATES)."""
    if len(stored) > MAX_STATUS_BYTES:
        return None
    state = contract.RunRecord.parse(stored).state  # torn: no end was stored whole
    return state if state in contract.END_STATES else None


Signer = Callable[[str, bytes], dict[str, str]]


def _signer(config: WatchdogConfig, where: StatusObject) -> Signer:
    """Headers that let the box's identity make a request: fetched once per store."""
    if where.scheme == "az":
        token = instance_metadata.azure_token(config, instance_metadata.AZURE_STORAGE_RESOURCE)
        bearer = {"Authorization": f"Bearer {token}", "x-ms-version": BLOB_API_VERSION}
        return lambda method, body: dict(bearer)
    keys = instance_metadata.aws_role_keys(config)

    def sign(method: str, body: bytes) -> dict[str, str]:
        now = datetime.datetime.now(datetime.timezone.utc)
        region = config.storage_region
        headers = bootstrap.signed_request(method, where.url, region, "s3", keys, now, body)
        headers.pop("host")  # http.client sends it
        return headers

    return sign


def _call(
    method: str, url: str, headers: dict[str, str], config: WatchdogConfig, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request, no redirect followed (the headers hold the box's credentials):
    the status, the answer's headers (lower case) and its body's first bytes."""
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    link = kind(parts.hostname, parts.port, timeout=config.request_timeout_seconds)
    try:
        link.request(method, parts.path, body=body if method == "PUT" else None, headers=headers)
        response = link.getresponse()
        answer = response.read(MAX_STATUS_BYTES + 1)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        link.close()


def _refused(doing: str, status: int, headers: dict[str, str], answer: bytes) -> str:
    """One line for an error answer: its status and the store's error code alone (an
    S3 error's body may quote the signed request, its session token with it)."""
    found = S3_ERROR_CODE.search(answer)
    code = headers.get("x-ms-error-code") or (found.group(1).decode() if found else "")
    return f"{doing} it: HTTP {status}{f' {code}' if code else ''}"
