"""A run whose trainer said it finished is finished: killed during its last uploads, the
real resume unit and end watch (on the fake box) start its container again to upload
them, never store or tell it failed; where its starts are spent and the files still
wait, its end in storage (moto's S3, Azurite, a file store) and its message name the
files storage lacks, which `fab runs` and `fab download` read there."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from box import contract, resume, run_ends
from tests.fakes.fake_box import FakeBox, box_with_s3
from tests.fixtures.run_folders import storage_only_target
from tests.ops.conftest import FAB
from tests.paths import REPO

T0 = 1_800_000_000.0
MINUTE = 60.0
KILLED = 137  # SIGKILL: the kernel's OOM killer, a `docker kill`
RUN = "r-done"
STEP = "step-000000040-epoch-0002.pt"
# What the trainer uploaded before the kill, and what it had not yet.
UPLOADED = {"metrics.jsonl": b'{"kind": "train", "step": 40}\n', "config.json": b"{}\n"}
NOT_UPLOADED = {
    "summary.json": b'{"val": {"mae": 16.2}}\n',
    "report.md": b"# the report\n",
    f"checkpoints/{STEP}": b"final weights",
    f"checkpoints/{STEP}.sha256": b"0" * 64 + f"  {STEP}\n".encode(),
}
MISSING = sorted(NOT_UPLOADED)
# status.json's `uploads` of a run with a store (null without one).
UPLOADS = {"pending": 1, "failing_since": None, "last_uploaded_at": T0 - 100}
LOOK_AT_MOST_SECONDS = run_ends.STORES_BUDGET_SECONDS + 15


def _resume(box: FakeBox, now: float, env: dict | None = None):
    started = time.monotonic()
    done = box.run("resume.py", now=now, env=env, timeout_seconds=LOOK_AT_MOST_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < LOOK_AT_MOST_SECONDS
    return done


def _started(box: FakeBox) -> list[str]:
    return [call[1] for call in box.calls("docker") if call[0] == "start"]


def _killed_in_its_last_uploads(box: FakeBox, state: str = "finished") -> str:
    """A run whose status.json says `state`, its container killed half a minute ago; its
    run dir holds files its folder in storage lacks."""
    container = box.add_trainer(
        RUN, running=False, created_at=T0 - 600, exit_code=KILLED, finished_at=T0 - 30
    )
    box.write_status(RUN, state=state, step=40, exit_code=0, val_mae=16.2, uploads=UPLOADS)
    for name, body in {**UPLOADED, **NOT_UPLOADED}.items():
        path = box.box_root / "runs" / RUN / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return container


def _starts_spent(box: FakeBox, container: str, exit_code: int = KILLED, env=None) -> float:
    """Looks until the resume unit has started the container as often as a boot allows,
    each start ending `exit_code` with the files still missing; when to look next."""
    now = T0
    while len(_started(box)) < len(resume.RETRY_DELAYS_SECONDS):
        now += MINUTE
        _resume(box, now, env)
        if box.containers()[0]["State"]["Running"]:
            box.exit_container(container, exit_code=exit_code, at=now + 10)
    return now + 10 + max(resume.RETRY_DELAYS_SECONDS) + MINUTE


@pytest.fixture
def aws_box(tmp_path, moto_server, fake_metadata, webhook):
    hook = webhook.server.endpoint
    box, bucket = box_with_s3(tmp_path, moto_server, fake_metadata.url, notify_webhook=hook)
    for name, body in UPLOADED.items():
        moto_server.client().put_object(Bucket=bucket, Key=f"runs/{RUN}/{name}", Body=body)
    return box, bucket


def _stored(moto_server, bucket: str) -> dict | None:
    s3 = moto_server.client()
    try:
        got = s3.get_object(Bucket=bucket, Key=f"runs/{RUN}/status.json")
    except s3.exceptions.NoSuchKey:
        return None
    return json.loads(got["Body"].read())


@pytest.mark.e2e  # moto
def test_a_finished_run_killed_in_its_last_uploads_starts_again_and_is_told_finished(
    aws_box, moto_server, webhook
):
    box, bucket = aws_box
    container = _killed_in_its_last_uploads(box)
    started = _resume(box, T0)
    assert _started(box) == [container]
    assert f"starting run {RUN} again" in started.stdout
    # Its start uploaded what storage lacked, said `finished` and exited 0.
    box.write_status(RUN, state="finished", step=40, exit_code=0, val_mae=16.2)
    box.exit_container(container, exit_code=0, at=T0 + 20)
    _resume(box, T0 + MINUTE)
    assert _stored(moto_server, bucket) is None  # the trainer's to store; never `failed`
    assert webhook.texts == [f"run {RUN} finished: best val MAE 16.20"]


@pytest.mark.e2e  # moto
def test_a_finished_run_with_nothing_to_upload_killed_after_its_end_is_told_finished(
    aws_box, moto_server, webhook
):
    box, bucket = aws_box
    box.add_trainer(RUN, running=False, created_at=T0 - 600, exit_code=KILLED, finished_at=T0 - 30)
    box.write_status(RUN, state="finished", step=40, exit_code=0, val_mae=16.2, uploads=None)
    _resume(box, T0)
    assert _started(box) == []
    assert _stored(moto_server, bucket) is None
    assert webhook.texts == [f"run {RUN} finished: best val MAE 16.20"]


@pytest.mark.e2e  # moto
@pytest.mark.parametrize("stored_before", [None, "finished-upload-pending"])
def test_a_finished_run_whose_uploads_never_land_names_the_files_storage_lacks(
    aws_box, moto_server, webhook, stored_before
):
    box, bucket = aws_box
    if stored_before:  # the trainer's own, stored as its last uploads began
        pending = json.dumps({"run_id": RUN, "state": stored_before}).encode()
        moto_server.client().put_object(Bucket=bucket, Key=f"runs/{RUN}/status.json", Body=pending)
    container = _killed_in_its_last_uploads(box, state="finished-upload-pending")
    now = _starts_spent(box, container)
    done = _resume(box, now)
    stored = _stored(moto_server, bucket)
    assert (stored["state"], stored["exit_code"]) == ("finished-upload-pending", KILLED)
    assert stored["uploads"][contract.UPLOADS_MISSING] == MISSING
    assert "failed" not in done.stdout + " ".join(webhook.texts)
    [told] = webhook.texts
    assert told.startswith(f"run {RUN} finished, but 4 of its files never reached storage (")
    assert all(name in told for name in MISSING), told
    assert str(box.box_root / "runs" / RUN) in told
    _resume(box, now + MINUTE)  # another look: told once, stored once
    assert len(webhook.texts) == 1 and _stored(moto_server, bucket) == stored


@pytest.mark.e2e  # moto
def test_a_finished_end_the_trainer_stored_is_never_written_over_by_missing_files(
    aws_box, moto_server
):
    # Its `finished` landed last; the box's listing is older than the store's truth.
    box, bucket = aws_box
    finished = json.dumps({"run_id": RUN, "state": "finished", "step": 40}).encode()
    moto_server.client().put_object(Bucket=bucket, Key=f"runs/{RUN}/status.json", Body=finished)
    container = _killed_in_its_last_uploads(box, state="finished-upload-pending")
    _resume(box, _starts_spent(box, container))
    got = moto_server.client().get_object(Bucket=bucket, Key=f"runs/{RUN}/status.json")
    assert got["Body"].read() == finished


@pytest.mark.e2e  # Azurite
def test_a_finished_run_whose_uploads_never_land_names_them_in_blob_storage(
    tmp_path, keyless_blob, fake_metadata, webhook
):
    blob = keyless_blob.create_container()
    fake_metadata.storage_token = keyless_blob.token()
    where = {"storage_uri": f"az://devstoreaccount1/{blob}/stack"}
    settings = {**where, "storage_endpoint": keyless_blob.endpoint}
    hook = {"notify_webhook": webhook.server.endpoint, "metadata_url": fake_metadata.url}
    box = FakeBox(tmp_path, cloud="azure", docker_wait_seconds=1, **settings, **hook)
    for name, body in UPLOADED.items():
        path = f"{blob}/stack/runs/{RUN}/{name}"
        keyless_blob.request("PUT", path, body, **{"x-ms-blob-type": "BlockBlob"})
    container = _killed_in_its_last_uploads(box, state="finished-upload-pending")
    env = {"SSL_CERT_FILE": str(keyless_blob.ca_file)}
    _resume(box, _starts_spent(box, container, exit_code=0, env=env), env)
    stored = json.loads(keyless_blob.request("GET", f"{blob}/stack/runs/{RUN}/status.json"))
    assert stored["state"] == "finished-upload-pending"
    assert stored["uploads"][contract.UPLOADS_MISSING] == MISSING
    [told] = webhook.texts
    assert told.startswith(f"run {RUN} finished, but 4 of its files never reached storage (")


def test_a_box_of_workers_whose_ranks_finished_is_not_started_to_upload(tmp_path):
    # Box 1 of a multi-node run: its heartbeat says finished; rank 0's box uploads.
    box = FakeBox(tmp_path, docker_wait_seconds=1)
    box.add_trainer(RUN, running=False, created_at=T0 - 600, exit_code=KILLED, finished_at=T0 - 30)
    heartbeat = box.box_root / "runs" / RUN / contract.HEARTBEAT_FILE
    heartbeat.write_text(json.dumps({"step": 40, "state": "finished", "updated_at": T0 - 40}))
    _resume(box, T0)
    assert _started(box) == []


def test_the_end_watch_starts_a_finished_run_killed_in_its_uploads_again_then_tells_it(
    tmp_path, webhook
):
    storage = tmp_path / "storage"
    box = FakeBox(
        tmp_path / "box",
        cloud="local",
        storage_uri=f"file://{storage}",
        notify_webhook=webhook.server.endpoint,
    )
    container = _killed_in_its_last_uploads(box)
    # Its start uploads what storage lacked, says `finished` and exits 0.
    finished = {"run_id": RUN, "state": "finished", "step": 40, "exit_code": 0, "val_mae": 16.2}
    status = box.box_root / "runs" / RUN / contract.STATUS_FILE
    box.runs_on_start(container, exit_code=0, writes={status: json.dumps(finished)})
    done = box.run("end_watch.py", container, now=T0, timeout_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _started(box) == [container]
    assert webhook.texts == [f"run {RUN} finished: best val MAE 16.20"]
    assert not (storage / "runs" / RUN / contract.STATUS_FILE).exists()


def test_the_end_watch_leaves_a_run_the_user_stopped_down_uploads_or_not(tmp_path, webhook):
    box = FakeBox(tmp_path, cloud="local", notify_webhook=webhook.server.endpoint)
    container = _killed_in_its_last_uploads(box, state="finished-upload-pending")
    (box.box_root / "runs" / RUN / contract.STOPPED_BY_USER).touch()
    done = box.run("end_watch.py", container, now=T0, timeout_seconds=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _started(box) == [] and webhook.texts == []


def _fab(moto_server, target, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **moto_server.env, "GLUCOSE_TARGET": str(target), "COLUMNS": "250"}
    return subprocess.run([str(FAB), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.e2e  # moto
def test_fab_reads_the_files_the_box_named_and_calls_the_run_not_safe_to_delete(
    aws_box, moto_server, tmp_path
):
    box, bucket = aws_box
    container = _killed_in_its_last_uploads(box, state="finished-upload-pending")
    _resume(box, _starts_spent(box, container))
    target = storage_only_target(tmp_path / "target.json", f"s3://{bucket}")
    listed = _fab(moto_server, target, "runs", "--json", "--local", str(tmp_path / "none"))
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["runs"]
    assert (row["run_id"], row["state"]) == (RUN, "finished-upload-pending")
    assert row["missing"] == MISSING
    to = tmp_path / "results"
    fetched = _fab(moto_server, target, "download", "--run", RUN, "--offline", "--to", str(to))
    assert fetched.returncode == 3, fetched.stderr
    assert (
        f"not safe to `pulumi destroy`: the run finished, but 4 of its files have not reached "
        f"storage ({', '.join(MISSING)}); they wait on the box that ran it"
    ) in fetched.stderr
