#!/usr/bin/env python3
"""A new box's first step: fetch its programs from the stack's storage, install them.

The programs are too big for EC2's 16 KB of user data, so the user data holds only
this file, its unit, the settings and box-source.json: where the programs are (the
stack's storage and key) and the sha256 they must have. The box's own identity reads
them: on AWS the instance role (an S3 GET signed with SigV4 from IMDSv2's
credentials), on Azure the managed identity (a bearer token from IMDS). Then
install.py from the archive installs them and setup-box.sh sets the box up.

Fail closed: a box without its programs has no idle watchdog. While they cannot be
had the box says why in BOX_ROOT/failed (what `fab` shows) and retries; at
`deadline_seconds` after boot (12 min) it stops billing (AWS: shutdown, which stops the
instance; Azure: deallocate through ARM, OS shutdown as the last resort): a download
that trickles is cut at the deadline, the deallocate's requests at `stop_seconds` (an ARM
that drips its answer leaves the OS shutdown), a marker that cannot be written does not
hold up the stop, so the stop is asked within 15 minutes of boot on every path.
glucose-bootstrap.service runs this again at every boot until the programs are installed.

Standard library only, Python 3.10+ (contract.MIN_PYTHON): on an older one the
archive's install.py refuses, and the box says so and stops itself.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

# The box contract's paths (box/contract.py: this file travels without it, and
# tests/box/test_contract.py proves the copies equal); $GLUCOSE_BOX_FS_ROOT puts them
# under another root, for the tests.
ROOT = Path(os.environ.get("GLUCOSE_BOX_FS_ROOT") or "/")
SOURCE_PATH = ROOT / "etc/glucose-training/box-source.json"
SETTINGS_PATH = ROOT / "etc/glucose-training/watchdog.json"
PROGRAM_DIR = ROOT / "opt/glucose-training"
FAILED_MARKER = "failed"
CURRENT = "current"
PACKAGE = "box"
INSTALLER = tuple(f"{PACKAGE}/{name}" for name in ("__init__.py", "install.py", "contract.py"))
"""The archive's members `python3 -m box.install` runs from before anything is installed."""
HTTP_TIMEOUT_SECONDS = 20
DEFAULTS = {
    "box_root": "/var/lib/glucose-training",
    "imds_url": "http://169.254.169.254",
    "arm_url": "https://management.azure.com",
    "arm_api_version": "2024-11-01",
    "endpoint": "",
    "deadline_seconds": 12 * 60,
    "retry_seconds": 30,
    "stop_seconds": 3 * HTTP_TIMEOUT_SECONDS,
    "shutdown_command": ["shutdown", "-h", "now"],
}
BLOB_API_VERSION = "2021-08-06"
# The end (time.monotonic()) of the fetch, then of the stop: every request is cut there,
# its answer's head and body included. urllib's timeout holds per read, so an endpoint
# that trickles a byte at a time (storage, IMDS, ARM's answer to the deallocate) would
# otherwise keep the box up for days. This file travels alone in the user data, so it
# cannot use box/bounded_post.py: a timer signal (one thread, nothing else to cut) does
# here what that module's child does for the installed programs.
fetch_deadline = float("inf")
TOO_SLOW = "no whole answer in the time the box had; too slow"


def _http(url, headers=None, method="GET", data=None):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    with (
        _cut_at(fetch_deadline),
        urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response,
    ):
        return response.read()


@contextlib.contextmanager
def _cut_at(deadline):
    """Raise TimeoutError in whatever the body waits on once `deadline` passes."""
    if deadline == float("inf"):
        yield
        return

    def cut(signum, frame):
        raise TimeoutError(TOO_SLOW)

    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(TOO_SLOW)
    previous = signal.signal(signal.SIGALRM, cut)
    signal.setitimer(signal.ITIMER_REAL, left)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _imds_token(src, resource):
    query = urllib.parse.urlencode({"api-version": "2018-02-01", "resource": resource})
    url = f"{src['imds_url']}/metadata/identity/oauth2/token?{query}"
    return json.loads(_http(url, {"Metadata": "true"}))["access_token"]


def fetch_azure(src):
    """GET the blob with the managed identity's token (az://ACCOUNT/CONTAINER)."""
    account, container = src["storage"][len("az://") :].split("/", 1)
    endpoint = src["endpoint"] or f"https://{account}.blob.core.windows.net"
    headers = {
        "Authorization": "Bearer " + _imds_token(src, "https://storage.azure.com/"),
        "x-ms-version": BLOB_API_VERSION,
    }
    return _http(f"{endpoint}/{container}/{urllib.parse.quote(src['key'])}", headers)


def aws_credentials(src):
    """The instance role's credentials, through IMDSv2."""
    base = f"{src['imds_url']}/latest"
    token = _http(
        f"{base}/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"}, "PUT", b""
    ).decode()
    headers = {"X-aws-ec2-metadata-token": token}
    roles = f"{base}/meta-data/iam/security-credentials/"
    role = _http(roles, headers).decode().split()[0]
    return json.loads(_http(roles + role, headers))


def signed_s3_get(url, region, credentials, now):
    """The headers of a SigV4-signed S3 GET of `url`, as botocore signs one."""
    return signed_request("GET", url, region, "s3", credentials, now)


def signed_request(method, url, region, service, credentials, now, body=b""):
    """The headers of a SigV4-signed request (box/notify.py signs its SNS Publish here)."""
    parts = urllib.parse.urlsplit(url)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {
        "host": parts.netloc,
        "x-amz-content-sha256": payload,
        "x-amz-date": stamp,
        "x-amz-security-token": credentials["Token"],
    }
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            parts.query,
            "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)),
            names,
            payload,
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + credentials["SecretAccessKey"]).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials['AccessKeyId']}/{scope}, "
        f"SignedHeaders={names}, Signature={signature}"
    )
    return headers


def fetch_aws(src):
    """GET the object with the instance role (s3://BUCKET)."""
    bucket = src["storage"][len("s3://") :].split("/", 1)[0]
    key = urllib.parse.quote(src["key"])
    if src["endpoint"]:
        url = f"{src['endpoint']}/{bucket}/{key}"
    else:
        url = f"https://{bucket}.s3.{src['region']}.amazonaws.com/{key}"
    now = datetime.datetime.now(datetime.timezone.utc)
    headers = signed_s3_get(url, src["region"], aws_credentials(src), now)
    headers.pop("host")
    return _http(url, headers)


def fetch(src):
    archive = (fetch_aws if src["cloud"] == "aws" else fetch_azure)(src)
    digest = hashlib.sha256(archive).hexdigest()
    if digest != src["sha256"]:
        raise ValueError(f"the archive's sha256 is {digest}, the box expects {src['sha256']}")
    return archive


def install(archive):
    """install.py from the archive installs it: None, or why it did not."""
    with tempfile.TemporaryDirectory() as work:
        path = Path(work, "programs.tar")
        path.write_bytes(archive)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            Path(work, PACKAGE).mkdir()
            for member in INSTALLER:
                Path(work, member).write_bytes(tar.extractfile(member).read())
        done = subprocess.run(
            [sys.executable, "-m", f"{PACKAGE}.install", path, SETTINGS_PATH],
            cwd=work,
            stderr=subprocess.PIPE,
            text=True,
        )
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["no output"])[-1]
    return None


def say_failed(src, text):
    """BOX_ROOT/failed: its first line is what `fab` shows. A marker that cannot be
    written (a full or read-only disk) is logged: it never holds up the stop."""
    print(f"glucose-bootstrap: {text}", file=sys.stderr, flush=True)
    marker = Path(src["box_root"], FAILED_MARKER)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.with_name(FAILED_MARKER + ".tmp").write_text(text + "\n")
        os.replace(marker.with_name(FAILED_MARKER + ".tmp"), marker)
    except OSError as error:
        print(f"glucose-bootstrap: {marker} not written: {error}", file=sys.stderr, flush=True)


def seconds_since_boot():
    """The kernel's uptime: the box's deadline counts from its boot, not from this start
    (cloud-init may start it minutes in); 0 where it cannot be read."""
    try:
        return float((ROOT / "proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def stop_billing(src):
    global fetch_deadline
    fetch_deadline = time.monotonic() + src["stop_seconds"]  # the deallocate's requests
    if src["cloud"] == "azure":
        try:
            url = f"{src['imds_url']}/metadata/instance?api-version=2021-02-01"
            vm = json.loads(_http(url, {"Metadata": "true"}))["compute"]["resourceId"]
            token = _imds_token(src, src["arm_url"] + "/")
            deallocate = f"{src['arm_url']}{vm}/deallocate?api-version={src['arm_api_version']}"
            _http(deallocate, {"Authorization": "Bearer " + token}, "POST", b"")
            return
        except Exception as error:  # an OS shutdown at least stops the work
            print(f"glucose-bootstrap: deallocate failed: {error}", file=sys.stderr)
    subprocess.run(src["shutdown_command"], check=False)


def main():
    if (PROGRAM_DIR / CURRENT).exists():
        return 0  # installed: later boots have nothing to do
    global fetch_deadline
    src = {**DEFAULTS, **json.loads(SOURCE_PATH.read_text())}
    left = max(0.0, src["deadline_seconds"] - seconds_since_boot())
    give_up = fetch_deadline = time.monotonic() + left
    stop_at = datetime.datetime.now() + datetime.timedelta(seconds=left)
    where = f"{src['storage']}/{src['key']}"
    while True:
        try:
            archive = fetch(src)
            break
        except Exception as error:
            problem = error
            say_failed(
                src,
                f"the box programs cannot be fetched from {where} ({problem}); "
                f"retrying until {stop_at:%H:%M}, then the box stops itself",
            )
        # No try begins that the deadline would cut short: the last one says why.
        if time.monotonic() + src["retry_seconds"] >= give_up:
            say_failed(
                src,
                f"the box programs could not be fetched from {where} ({problem}): the box "
                "stopped itself (no idle watchdog without them); check that the object is "
                "there and the box's identity may read it, then start the box (`fab start`)",
            )
            stop_billing(src)
            return 1
        time.sleep(src["retry_seconds"])
    problem = install(archive)
    if problem:
        say_failed(src, f"the box programs could not be installed ({problem}); it stopped itself")
        stop_billing(src)
        return 1
    Path(src["box_root"], FAILED_MARKER).unlink(missing_ok=True)  # setup-box.sh says its own
    setup = [
        "bash",
        PROGRAM_DIR / CURRENT / PACKAGE / "setup-box.sh",
        src["ssh_user"],
        src["box_root"],
    ]
    return subprocess.run([*setup, src["cloud"]]).returncode


if __name__ == "__main__":
    sys.exit(main())
