"""A run killed before its trainer's first upload still gets its end in storage: the real
resume unit and end watch (on the fake box) write it with the box's own identity to
moto's S3 and to Azurite (keyless, tokens over HTTPS), never over an end the trainer
stored, within their time when storage does not answer."""

from __future__ import annotations

import json
import time

import pytest

from box import run_ends, stored_end
from box.watchdog_config import WatchdogConfig
from stack import storage_layout
from tests.fakes.fake_box import FakeBox, box_with_s3
from tests.fixtures.metadata import AWS_CREDENTIALS

T0 = 1_800_000_000.0
MINUTE = 60.0
KILLED = 137  # SIGKILL: the kernel's OOM killer, a `docker kill`
REGION = "us-east-1"
# What one look may take with storage that does not answer: the stores' budget and the
# programs' own start (no webhook: nothing to tell).
LOOK_AT_MOST_SECONDS = run_ends.STORES_BUDGET_SECONDS + 15


def _killed(box: FakeBox, run_id: str = "r-killed") -> str:
    """A run the kernel killed half a minute ago, before its first upload: its status on
    the box says running at step 3, its folder in storage holds nothing of it."""
    container = box.add_trainer(
        run_id, running=False, created_at=T0 - 600, exit_code=KILLED, finished_at=T0 - 30
    )
    box.write_status(run_id, step=3, epoch=0, updated_at=T0 - 40)
    return container


def _resume(box: FakeBox, now: float = T0, env: dict | None = None):
    started = time.monotonic()
    done = box.run("resume.py", now=now, env=env, timeout_seconds=LOOK_AT_MOST_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < LOOK_AT_MOST_SECONDS
    return done


@pytest.fixture
def aws_box(tmp_path, moto_server, fake_metadata):
    return box_with_s3(tmp_path, moto_server, fake_metadata.url, REGION)


def _stored(moto_server, bucket: str, run_id: str = "r-killed") -> dict:
    got = moto_server.client().get_object(Bucket=bucket, Key=f"runs/{run_id}/status.json")
    return json.loads(got["Body"].read())


@pytest.mark.e2e  # moto
def test_a_run_killed_before_its_first_upload_gets_its_end_in_s3(aws_box, moto_server):
    box, bucket = aws_box
    _killed(box)
    done = _resume(box)
    stored = _stored(moto_server, bucket)
    assert (stored["run_id"], stored["state"], stored["exit_code"]) == ("r-killed", "failed", 137)
    assert stored["step"] == 3 and stored["updated_at"] == pytest.approx(T0 - 30)  # when it died
    assert "r-killed: its end (failed, exit 137) stored in http://127.0.0.1:" in done.stdout


@pytest.mark.e2e  # Azurite
def test_a_run_killed_before_its_first_upload_gets_its_end_in_blob_storage(
    tmp_path, keyless_blob, fake_metadata
):
    container = keyless_blob.create_container()
    fake_metadata.storage_token = keyless_blob.token()
    box = FakeBox(
        tmp_path,
        cloud="azure",
        metadata_url=fake_metadata.url,
        docker_wait_seconds=1,
        storage_uri=f"az://devstoreaccount1/{container}/stack",
        storage_endpoint=keyless_blob.endpoint,
    )
    _killed(box)
    _resume(box, env={"SSL_CERT_FILE": str(keyless_blob.ca_file)})
    stored = json.loads(keyless_blob.request("GET", f"{container}/stack/runs/r-killed/status.json"))
    assert (stored["state"], stored["exit_code"]) == ("failed", 137)


@pytest.mark.e2e  # moto
@pytest.mark.parametrize("exit_code", [0, KILLED])
def test_an_end_the_trainer_stored_is_never_written_over(aws_box, moto_server, exit_code):
    # Finished and uploaded; whatever the container did after (killed in its teardown).
    box, bucket = aws_box
    finished = json.dumps({"run_id": "r-done", "state": "finished", "step": 50}).encode()
    moto_server.client().put_object(Bucket=bucket, Key="runs/r-done/status.json", Body=finished)
    box.add_trainer(
        "r-done", running=False, created_at=T0 - 600, exit_code=exit_code, finished_at=T0 - 30
    )
    box.write_status("r-done", state="finished", step=50)
    _resume(box)
    _resume(box, now=T0 + MINUTE)
    got = moto_server.client().get_object(Bucket=bucket, Key="runs/r-done/status.json")
    assert got["Body"].read() == finished


@pytest.mark.e2e  # moto
def test_a_stored_status_of_a_run_going_on_is_replaced_by_its_end(aws_box, moto_server):
    # Resumed after an eviction (its status in storage says preempted), then killed
    # before its next upload.
    box, bucket = aws_box
    preempted = json.dumps({"state": "preempted", "step": 20}).encode()
    moto_server.client().put_object(Bucket=bucket, Key="runs/r-killed/status.json", Body=preempted)
    _killed(box)
    _resume(box)
    assert _stored(moto_server, bucket)["state"] == "failed"


@pytest.mark.e2e  # moto
def test_storage_that_does_not_answer_costs_a_bounded_look_and_is_tried_at_the_next(
    tmp_path, private_moto_server, fake_metadata
):
    box, bucket = box_with_s3(tmp_path, private_moto_server, fake_metadata.url, REGION)
    _killed(box)
    private_moto_server.stall()
    try:
        first = _resume(box)
    finally:
        private_moto_server.unstall()
    assert "its end was not stored" in first.stdout and "next look" in first.stdout
    second = _resume(box, now=T0 + MINUTE)
    assert _stored(private_moto_server, bucket)["exit_code"] == KILLED
    said = first.stdout + first.stderr + second.stdout + second.stderr
    for secret in (AWS_CREDENTIALS["SecretAccessKey"], AWS_CREDENTIALS["Token"]):
        assert secret not in said


def test_the_end_watch_on_this_machine_stores_the_end_in_its_file_store(tmp_path):
    storage = tmp_path / "storage"
    box = FakeBox(tmp_path / "box", cloud="local", storage_uri=f"file://{storage}")
    container = _killed(box)
    done = box.run("end_watch.py", container, now=T0, timeout_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = json.loads((storage / "runs" / "r-killed" / "status.json").read_text())
    assert (stored["state"], stored["exit_code"]) == ("failed", 137)


def test_a_run_that_ended_in_order_is_left_to_its_trainer(tmp_path):
    # Stopped with a checkpoint uploaded (75): the trainer stored how it stands.
    storage = tmp_path / "storage"
    box = FakeBox(tmp_path / "box", cloud="local", storage_uri=f"file://{storage}")
    container = box.add_trainer(
        "r-stopped", running=False, created_at=T0 - 600, exit_code=75, finished_at=T0 - 30
    )
    done = box.run("end_watch.py", container, now=T0, timeout_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (storage / "runs").exists()


@pytest.mark.parametrize(
    ("uri", "url"),
    [
        ("s3://b", "https://b.s3.eu-west-1.amazonaws.com/runs/r1/status.json"),
        ("s3://b/stack/", "https://b.s3.eu-west-1.amazonaws.com/stack/runs/r1/status.json"),
        ("az://acct/c", "https://acct.blob.core.windows.net/c/runs/r1/status.json"),
        ("az://acct/c/p/q", "https://acct.blob.core.windows.net/c/p/q/runs/r1/status.json"),
        ("file:///srv/store", "/srv/store/runs/r1/status.json"),
    ],
)
def test_the_box_writes_where_fab_and_the_trainer_look_for_the_run(uri, url):
    config = WatchdogConfig("aws", 30, storage_uri=uri, storage_region="eu-west-1")
    where = stored_end.status_object(config, "r1")
    assert where is not None and where.url == url
    folder = storage_layout.run_uri(uri, "r1").split("://", 1)[1]
    assert url.endswith(folder.split("/", 1)[1] + "/status.json")
