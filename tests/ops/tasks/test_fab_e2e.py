"""`fab` end to end against a local box: real sshd, real Docker engines, a real
registry, moto as S3, and the real trainer image built by `fab build`.

The box's engine is a second, empty dockerd (tests/fixtures/box_engine.py), so the
image really travels: pulled from the registry, or streamed by `docker save | load`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from box.contract import RunRecord
from tests.fixtures.sshd import start_sshd
from tests.fixtures.trainer_image import host_extra_ca_pem
from tests.local_server import free_port
from tests.ops.conftest import (
    FAB,
    STATUS_WAIT_SECONDS,
    LocalBox,
    assert_one_line_error,
    make_local_box,
    wait_for_status,
)
from tests.paths import REPO
from trainer.data import manifest as dataset_manifest

pytestmark = pytest.mark.e2e

RUN_ID = "e2e-run"
DATASET = "synthetic-e2e"
POLL_SECONDS = 2
TOLD_WITHIN_SECONDS = 60
CTRL_C_EXIT_SECONDS = 120
# A cold build on vfs copies the whole filesystem per step: many minutes on 2 cores.
BUILD_TIMEOUT_SECONDS = 2400
# Small and quick on 2 CPU cores: resnet18, tiny batches, a checkpoint every 4 steps.
TRAINER_ARGS = (
    "--model resnet18 --batch-size 16 --epochs 50 --log-every 1 --checkpoint-every-steps 4"
)


@pytest.fixture(scope="module")
def e2e_box(box_engine, registry, moto_server, tmp_path_factory) -> LocalBox:
    """A box whose sessions use the box engine, storage in moto, images via the registry."""
    directory = tmp_path_factory.mktemp("e2e-box")
    server = start_sshd(directory / "sshd", {"DOCKER_HOST": box_engine.docker_host})
    box = make_local_box(server, directory)
    storage = moto_server.create_bucket(prefix="stack")
    box.write_target(
        storageUri=storage,
        registry=registry.address,
        containerEnv=moto_server.env,
        dockerNetwork="host",
    )
    box.env.update(moto_server.env)
    yield box
    server.stop()


@pytest.fixture(scope="module")
def extra_ca(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ca") / "extra-ca.pem"
    path.write_text(host_extra_ca_pem())
    return path


@pytest.fixture(scope="module")
def built(e2e_box, trainer_base_image, extra_ca) -> str:
    """`fab build` on the local stand-in base; returns the local image name."""
    started = time.monotonic()
    result = e2e_box.fab(
        "build", "--base-image", trainer_base_image, "--extra-ca", str(extra_ca),
        timeout=BUILD_TIMEOUT_SECONDS,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"fab build: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dataset(e2e_box, tmp_path_factory) -> str:
    """A small synthetic dataset, uploaded with `fab upload-data`; returns its name."""
    data = tmp_path_factory.mktemp("data") / DATASET
    subprocess.run(
        [sys.executable, "-m", "trainer", "synth", "--out", str(data), "--cases", "12",
         "--windows-per-case", "64", "--seed", "0"],
        check=True, capture_output=True,
    )  # fmt: skip
    _fab_ok(e2e_box, "upload-data", "--data", str(data))
    return DATASET


@pytest.fixture
def box_has_trainer_image(built, box_engine) -> str:
    """The box engine holds the trainer image (copied by the test, not by fab)."""
    if box_engine.docker("image", "inspect", built).returncode != 0:
        save = subprocess.Popen(["docker", "save", built], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "load"],
            stdin=save.stdout,
            env={**os.environ, "DOCKER_HOST": box_engine.docker_host},
            capture_output=True,
            check=True,
        )
        assert save.wait() == 0 and load.returncode == 0
    return built


def _fab_ok(box: LocalBox, *args: str) -> subprocess.CompletedProcess:
    result = box.fab(*args)
    assert result.returncode == 0, f"fab {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def _wait_for_status(box: LocalBox, pattern: str) -> str:
    return wait_for_status(box.fab, RUN_ID, pattern, POLL_SECONDS)


def _tree_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _step(status_out: str) -> int:
    return int(re.search(r"step (\d+) /", status_out).group(1))


def _s3_objects(moto_server, uri: str) -> dict[str, bytes]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = moto_server.client()
    objects = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            objects[item["Key"][len(prefix) + 1 :]] = body
    return objects


def test_build_push_train_status_stop_resume_download(
    e2e_box, built, dataset, registry, box_engine, moto_server, webhook, tmp_path
):
    box = e2e_box
    outputs = json.loads(box.target_file.read_text())
    box.write_target(**{**outputs, "notifyWebhook": webhook.server.endpoint})
    before = _tree_bytes(registry.storage_dir)
    # --image-name: HEAD moves under a shared checkout; CI would not need it.
    pushed = _fab_ok(box, "push", "--image-name", built)
    sent_mb = (_tree_bytes(registry.storage_dir) - before) / 1e6
    print(
        f"{pushed.stderr.strip().splitlines()[-1]}; registry grew {sent_mb:.0f} MB", file=sys.stderr
    )
    assert re.search(r"pushed \S+ in [\d.]+ s: \d+ layers sent", pushed.stderr)

    common = ("--dataset", dataset, "--run", RUN_ID, "--trainer-args", TRAINER_ARGS,
              "--image-name", built)  # fmt: skip
    started = _fab_ok(box, "train", *common)
    assert started.stdout.strip() == RUN_ID
    pulled = f"{registry.address}/glucose-training:{built.rsplit(':', 1)[1]}"
    assert box_engine.docker("image", "inspect", pulled).returncode == 0
    running = _wait_for_status(box, r"state:\s+running[\s\S]*step [1-9]\d* /")
    assert "gpu:        none" in running
    # containerEnv (moto's keys) reached the trainer through its mounted file only.
    inspected = box_engine.docker("inspect", f"glucose-train-{RUN_ID}").stdout
    assert "AWS_SECRET_ACCESS_KEY" not in inspected and "GLUCOSE_ENV_FILE" in inspected

    stopped = _fab_ok(box, "stop", "--run", RUN_ID)
    storage = json.loads(box.target_file.read_text())["storageUri"]
    match = re.search(
        rf"checkpoint: ({re.escape(storage)}/runs/{RUN_ID}/checkpoints/(\S+))", stopped.stdout
    )
    assert match, stopped.stdout
    assert "exit 75" in stopped.stdout
    objects = _s3_objects(moto_server, f"{storage}/runs/{RUN_ID}")
    checkpoint = objects[f"checkpoints/{match.group(2)}"]
    sidecar = objects[f"checkpoints/{match.group(2)}.sha256"].decode()
    assert sidecar.split()[0] == hashlib.sha256(checkpoint).hexdigest()
    after_stop = _fab_ok(box, "status", "--run", RUN_ID).stdout
    assert "stopped by `fab stop`" in after_stop
    stopped_step = _step(after_stop)

    _fab_ok(box, "train", *common, "--max-steps", str(stopped_step + 4))
    finished = _wait_for_status(box, r"state:\s+finished")
    assert _step(finished) == stopped_step + 4
    log = _fab_ok(box, "logs", "--run", RUN_ID).stdout
    assert f"resume: step {stopped_step}" in log
    # The lab box's end watch told the end once; the user's `fab stop` was not told.
    told = webhook.wait_for_texts(1, TOLD_WITHIN_SECONDS)
    assert len(told) == 1 and told[0].startswith(f"run {RUN_ID} finished: best val MAE "), told
    box.write_target(**outputs)

    to = tmp_path / "download"
    downloaded = _fab_ok(box, "download", "--run", RUN_ID, "--to", str(to))
    assert "safe to `pulumi destroy`" in downloaded.stderr
    objects = _s3_objects(moto_server, f"{storage}/runs/{RUN_ID}")
    manifest = json.loads((to / "manifest.json").read_text())
    assert set(manifest["files"]) == set(objects)
    for key, body in objects.items():
        assert (
            hashlib.sha256((to / key).read_bytes()).hexdigest() == manifest["files"][key]["sha256"]
        )
        assert (to / key).read_bytes() == body
    _assert_tensorboard_serves(box)


def _assert_tensorboard_serves(box: LocalBox) -> None:
    """`fab tensorboard` prints a URL that answers through the tunnel; Ctrl-C tidies up."""
    fab = subprocess.Popen(
        [str(FAB), "tensorboard", "--run", RUN_ID, "--port", str(free_port())],
        cwd=REPO, env={**box.environment(), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = re.search(r"http://\S+", fab.stdout.readline()).group(0)
        deadline = time.monotonic() + STATUS_WAIT_SECONDS
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    assert b"TensorBoard" in response.read()
                    break
            except OSError:
                assert time.monotonic() < deadline, f"no TensorBoard at {url}"
                time.sleep(POLL_SECONDS)
    finally:
        fab.send_signal(signal.SIGINT)
        _wait_or_dump_threads(fab, CTRL_C_EXIT_SECONDS)
    assert "glucose-tensorboard" not in box.fab("ssh", "--command", "docker ps").stdout


def _wait_or_dump_threads(process: subprocess.Popen, timeout_s: float) -> None:
    """Wait for `process`; one that hangs fails the test with every thread's stack
    (PYTHONFAULTHANDLER dumps them on SIGABRT): a hang's cause, not just its timeout."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        _, stderr = process.communicate(timeout=30)
        pytest.fail(f"still running {timeout_s} s after Ctrl-C; its threads:\n{stderr[-8000:]}")


def test_without_a_registry_the_image_goes_by_save_and_load(
    e2e_box, built, dataset, box_engine, tmp_path
):
    box = make_local_box(e2e_box.server, tmp_path)
    box.write_target(**{**json.loads(e2e_box.target_file.read_text()), "registry": "",
                        "boxRoot": str(box.root)})  # fmt: skip
    box.env.update(e2e_box.env)
    box_engine.docker("image", "rm", "--force", built)
    started = time.monotonic()
    result = box.fab("train", "--dataset", dataset, "--run", "e2e-saveload", "--max-steps", "1",
                     "--trainer-args", TRAINER_ARGS, "--image-name", built)  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded = re.search(r"loaded \S+ on the box over SSH: \d+ MB in \d+ s", result.stderr)
    assert loaded, result.stderr
    print(f"{loaded.group(0)}; fab train took {time.monotonic() - started:.0f} s", file=sys.stderr)
    assert box_engine.docker("image", "inspect", built).returncode == 0


def test_wrong_ssh_key_is_refused_clearly(e2e_box, dataset, tmp_path):
    wrong = tmp_path / "wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    box = make_local_box(e2e_box.server, tmp_path)
    # The dataset is looked up in storage before the box is asked: it must be there.
    box.write_target(**{**json.loads(e2e_box.target_file.read_text()), "sshKeyPath": str(wrong),
                        "boxRoot": str(box.root)})  # fmt: skip
    box.env.update(e2e_box.env)
    assert_one_line_error(box.fab("train", "--dataset", dataset), "refused SSH key", str(wrong))


def test_box_going_away_mid_logs_is_one_clear_line(
    e2e_box, box_has_trainer_image, box_engine, sshd_factory, tmp_path
):
    server = sshd_factory({"DOCKER_HOST": box_engine.docker_host})
    box = make_local_box(server, tmp_path)
    e2e_outputs = json.loads(e2e_box.target_file.read_text())
    box.write_target(**{**e2e_outputs, "sshPort": server.port, "boxRoot": str(box.root),
                        "sshKeyPath": str(server.client_key)})  # fmt: skip
    ticker = "glucose-train-e2e-ticker"
    box_engine.docker("rm", "--force", ticker)
    image = box_has_trainer_image
    started = box_engine.docker(
        "run", "--detach", "--name", ticker, "--label", "glucose-training.run-id=e2e-ticker",
        "--entrypoint", "bash", image, "-c", "while true; do echo tick; sleep 0.2; done",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    follow = subprocess.Popen(
        [str(FAB), "logs", "--follow", "--run", "e2e-ticker"],
        cwd=REPO, env=box.environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    first = follow.stdout.readline().strip()
    assert first == "tick", follow.communicate(timeout=60)[1]
    server.stop()
    _, stderr = follow.communicate(timeout=60)
    box_engine.docker("rm", "--force", ticker)
    assert follow.returncode == 1
    assert "Traceback" not in stderr
    assert "lost the connection to" in stderr.strip().splitlines()[-1]


def test_prepare_data_on_the_box_publishes_a_dataset_fab_train_finds_cached(
    e2e_box, box_has_trainer_image, open_data, moto_server, tmp_path
):
    """The open dataset's layout served from 127.0.0.1 (tests/fixtures/vitaldb_cases.py);
    the image already on the box (no registry), so only preparing and publishing count."""
    box = make_local_box(e2e_box.server, tmp_path)
    box.write_target(**{**json.loads(e2e_box.target_file.read_text()), "registry": "",
                        "boxRoot": str(box.root)})  # fmt: skip
    box.env.update(e2e_box.env)
    args = ("prepare-data", "--milestone", "M1", "--image-name", box_has_trainer_image,
            "--prepare-args", f"--source-url {open_data.url} --workers 1")  # fmt: skip
    started = time.monotonic()
    first = _fab_ok(box, *args)
    print(f"fab prepare-data: {time.monotonic() - started:.0f} s", file=sys.stderr)
    uri = first.stdout.strip().splitlines()[-1]
    assert uri == f"{json.loads(box.target_file.read_text())['storageUri']}/datasets/vitaldb-m1"
    assert "case 20: skipped: download failed" in first.stdout  # the followed log
    objects = _s3_objects(moto_server, uri)
    manifest = json.loads(objects.pop("manifest.json"))
    assert set(objects) == set(manifest["files"]) >= {"windows.npy", "meta.json"}
    for name, body in objects.items():
        assert hashlib.sha256(body).hexdigest() == manifest["files"][name]["sha256"], name
    meta = json.loads(objects["meta.json"])
    assert meta["source"] == "vitaldb" and meta["cases"] == [11, 12, 13, 17]
    # The box's cache is that very dataset: `fab train --dataset vitaldb-m1` uses it as is.
    assert dataset_manifest.matches(box.root / "datasets" / "vitaldb-m1", manifest)
    plan = _fab_ok(box, "plan", "--dataset", "vitaldb-m1", "--epochs", "1", "--json")
    assert json.loads(plan.stdout)["request"]["windows"] == meta["windows"]

    nothing = box.fab("prepare-data", "--cases", "14", "--name", "no-pleth",
                      "--image-name", box_has_trainer_image,
                      "--prepare-args", f"--source-url {open_data.url}")  # fmt: skip
    assert_one_line_error(nothing, "prepare-vitaldb on ", "no usable windows in 1 cases")


# --- fab sweep: the box runs the queue, a stop and the resume unit bring it back ------

SWEEP_ID = "e2e-sweep"
SWEEP_TRIALS = (f"{SWEEP_ID}-t000", f"{SWEEP_ID}-t001")
SWEEP_TRAINER_ARGS = "--model resnet18 --batch-size 16 --epochs 3 --log-every 1 " \
    "--checkpoint-every-steps 2"  # fmt: skip


def _box_program(box: LocalBox, box_engine, program: str, *args: str) -> str:
    """A box program (box/), as its systemd unit runs it, on this box's root and engine."""
    config = box.root.parent / "watchdog.json"
    config.write_text(json.dumps({"cloud": "local", "idle_shutdown_minutes": 30,
                                  "box_root": str(box.root)}))  # fmt: skip
    env = {**os.environ, "GLUCOSE_WATCHDOG_CONFIG": str(config),
           "DOCKER_HOST": box_engine.docker_host}  # fmt: skip
    done = subprocess.run(
        ["python3", "-m", f"box.{Path(program).stem}", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _sweep_file(box: LocalBox, name: str) -> dict:
    try:
        return json.loads((box.root / "sweeps" / SWEEP_ID / name).read_text())
    except (OSError, ValueError):
        return {}


def _trial_steps(box: LocalBox) -> list[int]:
    return [RunRecord.read(box.root / "runs" / run_id).step or 0 for run_id in SWEEP_TRIALS]


def _wait_until(check, what: str) -> None:
    deadline = time.monotonic() + STATUS_WAIT_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(POLL_SECONDS)


def test_a_sweep_runs_on_the_box_stops_mid_trial_and_the_resume_unit_finishes_it(
    e2e_box, built, dataset, box_engine, tmp_path
):
    box = e2e_box
    started = _fab_ok(box, "sweep", "--dataset", dataset, "--sweep", SWEEP_ID,
                      "--param", "lr=0.001,0.003", "--concurrent", "2",
                      "--trainer-args", SWEEP_TRAINER_ARGS, "--image-name", built)  # fmt: skip
    assert started.stdout.strip().splitlines()[-1] == SWEEP_ID
    # `fab` is gone from here on: the box alone runs the queue.
    _wait_until(lambda: min(_trial_steps(box)) >= 2, "both trials stepped")
    explained = json.loads(_box_program(box, box_engine, "watchdog.py", "--explain"))
    assert "sweep" in explained["busy_reasons"]

    # What an eviction or the nightly stop does to the container: SIGTERM, then waits.
    name = f"glucose-sweep-{SWEEP_ID}"
    box_engine.docker("stop", "--time", "120", name)
    exit_code = box_engine.docker("inspect", "--format", "{{.State.ExitCode}}", name)
    assert exit_code.stdout.strip() == "75"
    assert _sweep_file(box, "status.json")["state"] == "stopped"

    assert f"starting run {SWEEP_ID} again" in _box_program(box, box_engine, "resume.py")
    _wait_until(lambda: _sweep_file(box, "status.json").get("state") == "finished", "finished")
    for run_id in SWEEP_TRIALS:  # each trial went on from its own checkpoint
        assert "resume: step" in (box.root / "runs" / run_id / "train.log").read_text()

    ranked = _fab_ok(box, "runs", "--sweep", SWEEP_ID, "--local", str(tmp_path / "runs"),
                     "--plot", str(tmp_path / "plots")).stdout  # fmt: skip
    chosen = _sweep_file(box, "result.json")["chosen"]
    assert f"chosen: {chosen}" in ranked and "evaluated once" in ranked
    assert (tmp_path / "plots" / "parallel_coordinates.png").is_file()
