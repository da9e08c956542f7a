"""A new box's first boot: the real bootstrap.py fetches its programs with the box's own
identity from real storage (moto's S3, Azurite taking Azure AD tokens only), installs
them and sets the box up; when they cannot be had it says why and stops the box.

The box is a root directory of the test's ($GLUCOSE_BOX_FS_ROOT), its instance
metadata the fake IMDS, its system tools the fakes setup-box.sh runs with.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import pytest

from box import bootstrap, contract
from stack import box_packing, cloud_init, storage_layout
from stack.blob_upload import put_blob
from tests.fakes.cloud_front import CloudFront
from tests.fakes.local_http import LocalHttpServer
from tests.fakes.system_tools import fake_system
from tests.fixtures.metadata import AWS_CREDENTIALS, AZURE_RESOURCE_ID
from tests.paths import BOX_DIR

pytestmark = pytest.mark.e2e

BOOTSTRAP_TIMEOUT_SECONDS = 180


class NewBox:
    """A box's root with its first-boot files, as cloud-init leaves them."""

    def __init__(self, tmp_path: Path, source: dict) -> None:
        self.root = tmp_path / "root"
        self.system = fake_system(tmp_path, also_fake=("shutdown",))
        self.box_root = tmp_path / "box-root"
        files = {
            cloud_init.SOURCE_PATH: json.dumps({"box_root": str(self.box_root)} | source),
            contract.WATCHDOG_CONFIG_PATH: box_packing.settings_text(
                source["cloud"], idle_shutdown_minutes=30
            ),
        }
        for path, text in files.items():
            (self.root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (self.root / path.lstrip("/")).write_text(text)

    def boot(self, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-S", str(BOX_DIR / "bootstrap.py")],
            env={
                **self.system.env,
                "GLUCOSE_BOX_FS_ROOT": str(self.root),
                "PYTHONDONTWRITEBYTECODE": "1",
                **(env or {}),
            },
            capture_output=True,
            text=True,
            timeout=BOOTSTRAP_TIMEOUT_SECONDS,
            check=False,
        )

    @property
    def current(self) -> Path:
        return self.root / contract.PROGRAM_DIR.lstrip("/") / contract.CURRENT

    def failed(self) -> str:
        return (self.box_root / contract.FAILED_MARKER).read_text()


def _source(cloud: str, storage: str, endpoint: str, imds: str, **extra) -> dict:
    programs = box_packing.build_programs()
    return {
        "cloud": cloud,
        "ssh_user": "ubuntu",
        "storage": storage,
        "key": storage_layout.box_programs_key(programs.sha256),
        "sha256": programs.sha256,
        "region": "us-east-1",
        "endpoint": endpoint,
        "imds_url": imds,
        "arm_url": imds,
        "deadline_seconds": 3,
        "retry_seconds": 1,
        **extra,
    }


@pytest.fixture
def bucket(moto_server) -> str:
    return moto_server.create_bucket(prefix="")


def _put_programs(moto_server, bucket: str, data: bytes | None = None) -> None:
    programs = box_packing.build_programs()
    moto_server.client().put_object(
        Bucket=bucket.removeprefix("s3://"),
        Key=storage_layout.box_programs_key(programs.sha256),
        Body=programs.archive if data is None else data,
    )


def test_an_aws_box_fetches_its_programs_with_its_instance_role_and_sets_itself_up(
    tmp_path, moto_server, bucket, fake_metadata
):
    _put_programs(moto_server, bucket)
    box = NewBox(tmp_path, _source("aws", bucket, moto_server.endpoint_url, fake_metadata.url))
    done = box.boot()
    assert done.returncode == 0, done.stderr
    assert (box.current / "box" / "watchdog.py").read_bytes() == (
        BOX_DIR / "watchdog.py"
    ).read_bytes()
    assert (box.box_root / contract.READY_MARKER).is_file()
    assert not (box.box_root / contract.FAILED_MARKER).exists()
    assert "systemctl restart glucose-watchdog.timer" in box.system.calls()
    seen = [r.path for r in fake_metadata.requests]
    assert "/latest/meta-data/iam/security-credentials/glucose-box-role" in seen


def test_the_s3_request_is_signed_as_botocore_signs_it(monkeypatch):
    now = datetime.datetime(2026, 11, 23, 3, 0, 0, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now)
    url = "https://glucose-storage.s3.eu-west-1.amazonaws.com/box/programs-0a1b.tar"
    ours = bootstrap.signed_s3_get(url, "eu-west-1", AWS_CREDENTIALS, now)
    request = botocore.awsrequest.AWSRequest(method="GET", url=url)
    credentials = botocore.credentials.Credentials(
        AWS_CREDENTIALS["AccessKeyId"], AWS_CREDENTIALS["SecretAccessKey"], AWS_CREDENTIALS["Token"]
    )
    botocore.auth.S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]


def test_an_sns_publish_is_signed_as_botocore_signs_it(monkeypatch):
    # box/notify.py publishes a run's end with this signature.
    now = datetime.datetime(2026, 11, 23, 3, 0, 0, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now)
    url, body = "https://sns.eu-west-1.amazonaws.com/", b"Action=Publish&Message=run+r1+finished"
    ours = bootstrap.signed_request("POST", url, "eu-west-1", "sns", AWS_CREDENTIALS, now, body)
    request = botocore.awsrequest.AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"x-amz-content-sha256": ours["x-amz-content-sha256"]},
    )
    credentials = botocore.credentials.Credentials(
        AWS_CREDENTIALS["AccessKeyId"], AWS_CREDENTIALS["SecretAccessKey"], AWS_CREDENTIALS["Token"]
    )
    botocore.auth.SigV4Auth(credentials, "sns", "eu-west-1").add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]


def test_an_azure_box_fetches_its_programs_with_its_managed_identity(
    tmp_path, keyless_blob, fake_metadata, monkeypatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(keyless_blob.ca_file))
    container = keyless_blob.create_container()
    _upload(keyless_blob, container, box_packing.build_programs().archive)
    fake_metadata.storage_token = keyless_blob.token()
    source = _source(
        "azure", f"az://devstoreaccount1/{container}", keyless_blob.endpoint, fake_metadata.url
    )
    box = NewBox(tmp_path, source)
    done = box.boot({"SSL_CERT_FILE": str(keyless_blob.ca_file)})
    assert done.returncode == 0, done.stderr
    assert (box.current / "box" / "install.py").is_file()
    assert (box.box_root / contract.READY_MARKER).is_file()


def test_a_token_for_another_audience_gets_no_programs(
    tmp_path, keyless_blob, fake_metadata, monkeypatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(keyless_blob.ca_file))
    container = keyless_blob.create_container()
    _upload(keyless_blob, container, box_packing.build_programs().archive)
    fake_metadata.storage_token = keyless_blob.token("https://management.azure.com/")
    source = _source(
        "azure", f"az://devstoreaccount1/{container}", keyless_blob.endpoint, fake_metadata.url
    )
    box = NewBox(tmp_path, source)
    done = box.boot({"SSL_CERT_FILE": str(keyless_blob.ca_file)})
    assert done.returncode == 1
    assert "HTTP Error 403" in box.failed() and not box.current.exists()


def test_a_box_without_its_programs_says_why_and_stops_itself(
    tmp_path, moto_server, bucket, fake_metadata
):
    box = NewBox(tmp_path, _source("aws", bucket, moto_server.endpoint_url, fake_metadata.url))
    done = box.boot()
    assert done.returncode == 1
    assert "could not be fetched" in box.failed() and "the box stopped itself" in box.failed()
    assert "fab start" in box.failed()
    assert "shutdown -h now" in box.system.calls()
    assert not box.current.exists()


def test_programs_that_are_not_the_pinned_build_are_refused(
    tmp_path, moto_server, bucket, fake_metadata
):
    _put_programs(moto_server, bucket, data=b"someone else's programs")
    box = NewBox(tmp_path, _source("aws", bucket, moto_server.endpoint_url, fake_metadata.url))
    assert box.boot().returncode == 1
    assert "sha256" in box.failed() and "the box expects" in box.failed()
    assert "shutdown -h now" in box.system.calls()


def test_an_azure_box_without_its_programs_deallocates_itself(tmp_path, fake_metadata):
    source = _source("azure", "az://glucosedata/training", "http://127.0.0.1:9", fake_metadata.url)
    box = NewBox(tmp_path, source)
    assert box.boot().returncode == 1
    assert fake_metadata.deallocated == [AZURE_RESOURCE_ID]
    assert "shutdown -h now" not in box.system.calls()


def test_a_dripping_arm_cannot_hold_the_stop_of_a_box_without_its_programs(tmp_path, fake_metadata):
    arm = CloudFront(fake_metadata.url)
    arm.drip("/deallocate", every_seconds=2)  # within the bootstrap's 20 s per read
    source = _source(
        "azure",
        "az://glucosedata/training",
        "http://127.0.0.1:9",
        fake_metadata.url,
        arm_url=arm.endpoint,
        stop_seconds=4,
    )
    box = NewBox(tmp_path, source)
    began = time.monotonic()
    try:
        done = box.boot()
    finally:
        arm.close()
    assert done.returncode == 1, done.stderr
    assert arm.dripped, "the deallocate never reached the dripping ARM"
    assert time.monotonic() - began < 3 + 4 + 10  # the deadline, the stop's, the start
    assert "deallocate failed" in done.stderr
    assert "shutdown -h now" in box.system.calls()  # the last resort


def test_a_box_whose_programs_are_installed_has_nothing_to_do_at_boot(
    tmp_path, moto_server, bucket, fake_metadata
):
    _put_programs(moto_server, bucket)
    box = NewBox(tmp_path, _source("aws", bucket, moto_server.endpoint_url, fake_metadata.url))
    assert box.boot().returncode == 0
    asked = len(fake_metadata.requests)
    assert box.boot().returncode == 0
    assert len(fake_metadata.requests) == asked


def _upload(keyless_blob, container: str, data: bytes) -> None:
    """As `pulumi up` does (stack.blob_upload), with the deployer's token."""
    programs = box_packing.build_programs()
    put_blob(
        keyless_blob.endpoint,
        container,
        storage_layout.box_programs_key(programs.sha256),
        data,
        keyless_blob.token,
    )


class _Trickle(BaseHTTPRequestHandler):
    """An endpoint that answers at once and then sends a byte every 0.2 s."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "143360")
        self.end_headers()
        try:
            for _ in range(143360):
                self.wfile.write(b"\0")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:  # the box hung up
            pass

    def log_message(self, *args) -> None:
        pass


def test_a_box_whose_programs_trickle_in_stops_itself_at_the_deadline(tmp_path, fake_metadata):
    trickle = LocalHttpServer(_Trickle)
    try:
        source = _source("aws", "s3://glucose-box", trickle.endpoint, fake_metadata.url)
        box = NewBox(tmp_path, source)
        began = time.monotonic()
        done = box.boot()
    finally:
        trickle.close()
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - began < 3 + 10  # the deadline, not the archive's 8 h
    assert "too slow" in box.failed() and "the box stopped itself" in box.failed()
    assert "shutdown -h now" in box.system.calls()


def test_a_box_that_cannot_write_why_it_failed_still_stops_itself(tmp_path, fake_metadata):
    source = _source("aws", "s3://glucose-box", "http://127.0.0.1:9", fake_metadata.url)
    box = NewBox(tmp_path, source)
    box.box_root.write_text("a file where BOX_ROOT should be: no marker can go there")
    done = box.boot()
    assert done.returncode == 1, done.stderr
    assert "not written" in done.stderr
    assert "shutdown -h now" in box.system.calls()
