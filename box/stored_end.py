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
is the trainer's to store and is left alone. A run whose trainer said it finished is
never stored failed: where its last uploads did not land, box/unfinished_uploads.py
stores it `finished-upload-pending` with the files storage lacks (`list_keys` reads
what the run's folder holds), over no end but a `finished-upload-pending` that named
other files.

Who writes: AWS the instance role (an S3 PUT signed with box/bootstrap.py's SigV4, keys
from IMDSv2), Azure the managed identity (Blob REST Put Blob with a bearer token from
IMDS); both may write runs/* already, as the trainer in the container uploads with them.
`file://` (the end watch on this machine) is a folder, written in place in a child
killed at the deadline (box/bounded_write.run_within: a stalled disk). A store's
requests (keys or token, read, write) are each bounded as a whole, answer included
(box/bounded_post.call), all of them by the store's deadline; one that failed is tried
again at the caller's next look. Logs name the store by its scheme and host, never a
key, a token or an answer's body. Standard library only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import unescape

from box import bootstrap, bounded_post, contract, instance_metadata
from box.bounded_write import lines_within
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
LIST_PAGE_BYTES = 4 * 1024 * 1024
"""Of one page of a listing (S3 and Blob give at most 1000 names a page, ~300 KB)."""
LIST_PAGES_AT_MOST = 20
"""A run's folder listed past this many pages is refused: no run of ours holds 20,000."""
XML_ENTITIES = {"&quot;": '"', "&apos;": "'"}
"""Besides &amp; &lt; &gt;, what a listing's names may hold escaped."""
Keeps = Callable[[bytes], "str | None"]
"""Given the stored status.json, the state that keeps it (no write), or None to write."""


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


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """A run's folder in the stack's storage (`contract.run_uri`)."""

    scheme: str
    """`s3`, `az` or `file`."""
    base: str
    """The bucket's or the container's URL; "" for `file`."""
    prefix: str
    """The keys of the run's objects start so (`[PREFIX/]runs/<id>/`); for `file`, the
    folder's path and a slash."""

    def object(self, name: str) -> StatusObject:
        if self.scheme == "file":
            return StatusObject("file", self.prefix + name)
        return StatusObject(self.scheme, f"{self.base}/{urllib.parse.quote(self.prefix + name)}")


def run_folder(config: WatchdogConfig, run_id: str) -> RunFolder | None:
    """Where `run_id`'s objects are in config.storage_uri; None where the box knows no
    storage."""
    if not config.storage_uri:
        return None
    parts = urllib.parse.urlsplit(contract.run_uri(config.storage_uri, run_id))
    where = parts.path.strip("/")
    if parts.scheme == "file":
        return RunFolder("file", "", f"/{where}/")
    if parts.scheme == "az":
        container, _, key = where.partition("/")
        endpoint = config.storage_endpoint or f"https://{parts.netloc}.blob.core.windows.net"
        return RunFolder("az", f"{endpoint.rstrip('/')}/{container}", f"{key}/")
    if config.storage_endpoint:
        base = f"{config.storage_endpoint.rstrip('/')}/{parts.netloc}"
    else:
        base = f"https://{parts.netloc}.s3.{config.storage_region}.amazonaws.com"
    return RunFolder("s3", base, f"{where}/")


def status_object(config: WatchdogConfig, run_id: str) -> StatusObject | None:
    """Where `run_id`'s status.json is in config.storage_uri (in the run's folder,
    `contract.run_uri`); None where the box knows no storage."""
    folder = run_folder(config, run_id)
    return folder.object(contract.STATUS_FILE) if folder is not None else None


def store(
    config: WatchdogConfig,
    run_id: str,
    record: dict,
    say: Callable[[str], None],
    give_up_at: float | None = None,
    keeps: Keeps | None = None,
) -> bool:
    """Write `record` (a status.json) as `run_id`'s end unless its folder in storage holds
    an end already (or what `keeps` keeps), by `give_up_at` (time.monotonic(); default
    STORE_SECONDS from now). Whether nothing is left to try. Never raises: a store never
    holds up a look."""
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
        said = _store(config, where, body, give_up, keeps or end_state)
    except (StoreError, instance_metadata.MetadataError, OSError) as error:
        # OSError: no child to be had (out of memory, of processes), a disk that failed.
        say(f"WARNING: run {run_id}: its end was not stored in {where.shown} ({error}); next look")
        return False
    if said == STORED:
        ended = f"{record.get('state')}, exit {record.get('exit_code')}"
        say(f"run {run_id}: its end ({ended}) stored in {where.shown}: its trainer stored none")
    return True  # stored, or an end kept: the trainer's own (or ours, from an earlier look)


def _store(
    config: WatchdogConfig, where: StatusObject, body: bytes, give_up: float, keeps: Keeps
) -> str:
    """Read what is there, write `body` unless `keeps` keeps it, by `give_up`: STORED,
    or KEPT and the state found."""
    if where.scheme == "file":
        return _store_file_within(Path(where.url), body, give_up, keeps)
    sign = _signer(config, where.scheme, where.url, give_up)
    status, headers, stored = _call("GET", where.url, sign("GET", where.url, b""), config, give_up)
    if status == 200 and (state := keeps(stored)):
        return f"{KEPT} {state}"
    if status not in (200, 404):
        raise StoreError(_refused("reading", status, headers, stored))
    # Written only over what was read: a trainer's upload in between is never lost.
    etag = headers.get("etag")
    conditions = {"If-None-Match": "*"} if status == 404 else {"If-Match": etag} if etag else {}
    put = {**sign("PUT", where.url, body), **conditions, "Content-Type": "application/json"}
    if where.scheme == "az":
        put["x-ms-blob-type"] = "BlockBlob"
    status, headers, answer = _call("PUT", where.url, put, config, give_up, body)
    if status in (409, 412):
        raise StoreError(f"its {contract.STATUS_FILE} {CHANGED}")
    if not 200 <= status < 300:
        raise StoreError(_refused("writing", status, headers, answer))
    return STORED


def _store_file_within(path: Path, body: bytes, give_up: float, keeps: Keeps) -> str:
    """_store_file in a child killed at `give_up`: a stalled disk holds up no look."""
    seconds = give_up - time.monotonic()
    late = f"the disk did not answer within {seconds:.0f} s"
    return lines_within(lambda report: report(_store_file(path, body, keeps)), seconds, late)[-1]


def _store_file(path: Path, body: bytes, keeps: Keeps) -> str:
    """A `file://` store: the same rule on a folder (a temp file renamed over, as the
    trainer's file store writes)."""
    try:
        if state := keeps(path.read_bytes()[: MAX_STATUS_BYTES + 1]):
            return f"{KEPT} {state}"
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with open(descriptor, "wb") as handle:
        handle.write(body)
    os.replace(partial, path)
    return STORED


def stored_record(stored: bytes) -> contract.RunRecord:
    """A stored status.json; an empty record for one past MAX_STATUS_BYTES or torn."""
    if len(stored) > MAX_STATUS_BYTES:
        return contract.RunRecord()
    return contract.RunRecord.parse(stored)


def end_state(stored: bytes) -> str | None:
    """The state of a stored status.json when it is an end (contract.END_STATES): what
    keeps it from a failed run's end."""
    state = stored_record(stored).state  # torn: no end was stored whole
    return state if state in contract.END_STATES else None


def list_keys(config: WatchdogConfig, run_id: str, give_up: float) -> set[str]:
    """The names of the objects in `run_id`'s folder in storage (relative to it), by
    `give_up`; StoreError (or MetadataError, OSError) when storage did not say them all."""
    folder = run_folder(config, run_id)
    if folder is None:
        raise StoreError("the box knows no storage")
    if folder.scheme == "file":
        return _list_file_within(Path(folder.prefix), give_up)
    sign = _signer(config, folder.scheme, folder.base, give_up)
    names: set[str] = set()
    token = ""
    for _ in range(LIST_PAGES_AT_MOST):
        url = _list_url(folder, token)
        status, headers, page = _call(
            "GET", url, sign("GET", url, b""), config, give_up, answer_bytes=LIST_PAGE_BYTES
        )
        if status != 200:
            raise StoreError(_refused("listing the run's folder", status, headers, page[:4096]))
        if len(page) >= LIST_PAGE_BYTES:
            raise StoreError(f"listing the run's folder: a page past {LIST_PAGE_BYTES} bytes")
        found, token = _listed(folder.scheme, page)
        names |= {name[len(folder.prefix) :] for name in found if name.startswith(folder.prefix)}
        if not token:
            return names
    raise StoreError(f"listing the run's folder: more than {LIST_PAGES_AT_MOST} pages")


def _list_url(folder: RunFolder, token: str) -> str:
    """One page of the run's folder: S3's ListObjectsV2 (query sorted and encoded as
    SigV4 signs it), Blob's List Blobs."""
    if folder.scheme == "az":
        query = {"restype": "container", "comp": "list", "prefix": folder.prefix}
        query.update({"marker": token} if token else {})
    else:
        query = {"list-type": "2", "prefix": folder.prefix}
        query.update({"continuation-token": token} if token else {})
    encoded = "&".join(
        f"{urllib.parse.quote(key, safe='-_.~')}={urllib.parse.quote(value, safe='-_.~')}"
        for key, value in sorted(query.items())
    )
    return f"{folder.base}?{encoded}"


def _listed(scheme: str, page: bytes) -> tuple[list[str], str]:
    """The names on a listing's page, and the token of the next ("" for none)."""
    text = page.decode(errors="replace")
    if scheme == "az":
        names = re.findall(r"<Blob>\s*<Name>([^<]*)</Name>", text)
        after = re.search(r"<NextMarker>([^<]*)</NextMarker>", text)
    else:
        names = re.findall(r"<Key>([^<]*)</Key>", text)
        truncated = "<IsTruncated>true</IsTruncated>" in text
        after = re.search(r"<NextContinuationToken>([^<]*)</NextContinuationToken>", text)
        after = after if truncated else None
    token = unescape(after.group(1), XML_ENTITIES) if after else ""
    return [unescape(name, XML_ENTITIES) for name in names], token


def _list_file_within(folder: Path, give_up: float) -> set[str]:
    """A `file://` store's run folder, walked in a child killed at `give_up`."""

    def walk(report: Callable[[str], None]) -> None:
        for root, _, names in os.walk(folder):
            for name in names:
                report((Path(root) / name).relative_to(folder).as_posix())

    seconds = give_up - time.monotonic()
    return set(lines_within(walk, seconds, f"the disk did not answer within {seconds:.0f} s"))


Signer = Callable[[str, str, bytes], dict[str, str]]


def _signer(config: WatchdogConfig, scheme: str, url: str, give_up: float) -> Signer:
    """Headers that let the box's identity make a request to `url` (or below it): fetched
    once per store."""
    if scheme == "az":
        resource = instance_metadata.AZURE_STORAGE_RESOURCE
        token = instance_metadata.azure_token(config, resource, give_up_at=give_up)
        bearer = {"Authorization": f"Bearer {token}", "x-ms-version": BLOB_API_VERSION}
        return lambda method, url, body: dict(bearer)
    keys = instance_metadata.aws_role_keys(config, give_up_at=give_up)

    def sign(method: str, url: str, body: bytes) -> dict[str, str]:
        now = datetime.datetime.now(datetime.timezone.utc)
        region = config.storage_region
        headers = bootstrap.signed_request(method, url, region, "s3", keys, now, body)
        headers.pop("host")  # http.client sends it
        return headers

    return sign


def _call(
    method: str,
    url: str,
    headers: dict[str, str],
    config: WatchdogConfig,
    give_up: float,
    body: bytes | None = None,
    answer_bytes: int = MAX_STATUS_BYTES + 1,
) -> tuple[int, dict[str, str], bytes]:
    """One request, bounded as a whole by `give_up` and the config's timeout, no redirect
    followed (the headers hold the box's credentials): the status, the answer's headers
    (lower case) and its body's first `answer_bytes`. StoreError when no whole answer
    came."""
    reply = bounded_post.call(
        method,
        url,
        body,
        headers,
        within_seconds=instance_metadata.seconds_for(config, give_up),
        answer_bytes=answer_bytes,
    )
    if reply.status is None or not reply.whole:
        raise StoreError(f"{method}: {reply.problem}")
    return reply.status, reply.headers, reply.body


def _refused(doing: str, status: int, headers: dict[str, str], answer: bytes) -> str:
    """One line for an error answer: its status and the store's error code alone (an
    S3 error's body may quote the signed request, its session token with it)."""
    found = S3_ERROR_CODE.search(answer)
    code = headers.get("x-ms-error-code") or (found.group(1).decode() if found else "")
    return f"{doing} it: HTTP {status}{f' {code}' if code else ''}"
