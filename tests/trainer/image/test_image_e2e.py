"""The trainer image, built from the Dockerfile on the local base, run for real.

Every container costs a full copy of the image on the vfs driver (~15 s idle,
minutes on a loaded machine), so facts about the image's inside come from one
probe container shared by several tests, and the dataset from one `synth` run.
"""

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.image.build import IMAGE_INPUTS
from tests.fixtures.docker_engine import DockerEngine
from tests.fixtures.trainer_image import TrainerImage, build_trainer_image
from tests.paths import REPO

pytestmark = pytest.mark.e2e

CONTAINER_TIMEOUT_SECONDS = 900
STOP_GRACE_SECONDS = 120  # what docs/image.md tells users to pass to `docker stop -t`
STEPS_BEFORE_STOP = 2
STEP_WAIT_SECONDS = 600
EXIT_PREEMPTED = 75
CODE_CHANGE_PUSH_LIMIT_BYTES = 1_000_000
# What the image may add on top of its base: the locked deps, the code, a user.
# VitalDB's reader (the `vitaldb` package) needs pandas and scipy: ~230 MB of it; the
# sweep driver's Optuna and the SQLAlchemy it needs ~40 MB (501 MB in all, 2026-11-24).
SIZE_OVER_BASE_LIMIT_BYTES = 550_000_000
APP_DIR = "/opt/glucose-training/app"
VENV_DIR = "/opt/glucose-training/venv"
DATA_MOUNT = "/workspace/data"
RUN_ID = "image-e2e"
RUN_MOUNT = f"/workspace/runs/{RUN_ID}"

PROBE = f"""
import json, os, pathlib, subprocess, torch
runs = pathlib.Path("/workspace/runs")
(runs / "probe").write_text("ok")
app = sorted(str(p.relative_to("{APP_DIR}")) for p in pathlib.Path("{APP_DIR}").rglob("*"))
print(json.dumps({{
    "uid": os.getuid(),
    "runs_writable": (runs / "probe").read_text() == "ok",
    "torch_version": torch.__version__,
    "torch_file": torch.__file__,
    "app_files": app,
    "opt_entries": sorted(os.listdir("/opt/glucose-training")),
    "help_exit": subprocess.run(["python", "-m", "trainer", "--help"],
                                capture_output=True).returncode,
    "matplotlib_dir_mode": oct(os.stat(os.environ["MPLCONFIGDIR"]).st_mode & 0o7777),
    "matplotlib_log": subprocess.run(
        ["python", "-c", "import logging; logging.basicConfig(level=logging.INFO); "
         "import matplotlib.pyplot"],
        capture_output=True, text=True, env={{**os.environ, "HOME": "/tmp"}},
    ).stderr,
}}))
"""


def _shared_dir(path: Path) -> Path:
    """A host dir the image's non-root user (uid 10001) may write through a mount."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


def _inspect(engine: DockerEngine, image: str) -> dict:
    result = engine.run(["image", "inspect", image], timeout_seconds=60)
    return json.loads(result.stdout)[0]


def _trainer(engine: DockerEngine, image: str, *args: str, volumes: dict[Path, str]):
    mounts = [arg for host, inside in volumes.items() for arg in ("-v", f"{host}:{inside}")]
    return engine.run(
        ["run", "--rm", "--network", "host", *mounts, image, *args],
        timeout_seconds=CONTAINER_TIMEOUT_SECONDS,
        check=False,
    )


@pytest.fixture(scope="module")
def probe(docker_engine: DockerEngine, trainer_image: TrainerImage) -> dict:
    """Facts from inside one container of the image."""
    result = docker_engine.run(
        ["run", "--rm", "--entrypoint", "python", trainer_image.tag, "-c", PROBE],
        timeout_seconds=CONTAINER_TIMEOUT_SECONDS,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dataset(docker_engine, trainer_image, tmp_path_factory) -> Path:
    """A small synthetic dataset written by the image's own `synth`."""
    data = _shared_dir(tmp_path_factory.mktemp("image-data") / "synth")
    result = _trainer(
        docker_engine, trainer_image.tag,
        "synth", "--out", DATA_MOUNT, "--cases", "12", "--windows-per-case", "64", "--seed", "0",
        volumes={data: DATA_MOUNT},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return data


def test_image_runs_as_a_non_root_user(probe):
    assert probe["uid"] != 0


def test_workspace_runs_is_writable_by_the_trainer(probe):
    assert probe["runs_writable"]


def test_image_keeps_the_base_images_torch(probe):
    assert probe["torch_version"].startswith("2.13.0")
    assert not probe["torch_file"].startswith(VENV_DIR), probe["torch_file"]


def test_image_holds_the_trainer_code_and_nothing_else(probe):
    assert probe["opt_entries"] == ["app", "requirements.txt", "venv"]
    assert {path.split("/")[0] for path in probe["app_files"]} == {"trainer", "box"}
    # Of the box programs, the contract the trainer imports, and no other.
    assert sorted(p for p in probe["app_files"] if p.startswith("box/")) == [
        "box/__init__.py",
        "box/contract.py",
    ]
    assert "trainer/__main__.py" in probe["app_files"]
    assert not [path for path in probe["app_files"] if path.endswith((".pyc", ".pem", ".key"))]


def test_matplotlib_finds_its_font_cache_built_in_a_folder_any_uid_may_write(probe):
    # `fab` runs each container as the box user's uid with HOME=/tmp, a new folder.
    assert probe["matplotlib_dir_mode"] == "0o1777"
    assert "fontManager" not in probe["matplotlib_log"], probe["matplotlib_log"]
    assert "cache directory" not in probe["matplotlib_log"], probe["matplotlib_log"]


def test_entrypoint_is_the_trainer_cli(docker_engine, trainer_image, probe):
    config = _inspect(docker_engine, trainer_image.tag)["Config"]
    assert config["Entrypoint"] == ["python", "-m", "trainer"]
    assert probe["help_exit"] == 0


def test_image_stops_with_sigterm_and_unbuffered_output(docker_engine, trainer_image):
    config = _inspect(docker_engine, trainer_image.tag)["Config"]
    assert config["StopSignal"] == "SIGTERM"
    assert "PYTHONUNBUFFERED=1" in config["Env"]


def test_image_labels_name_source_revision_and_version(docker_engine, trainer_image):
    labels = _inspect(docker_engine, trainer_image.tag)["Config"]["Labels"]
    assert len(trainer_image.revision) == 40
    assert labels["org.opencontainers.image.revision"] == trainer_image.revision
    assert labels["org.opencontainers.image.version"] == "0.0.0-test"
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_image_adds_little_over_its_base(docker_engine, trainer_image):
    image_bytes = _inspect(docker_engine, trainer_image.tag)["Size"]
    base_bytes = _inspect(docker_engine, trainer_image.base)["Size"]
    print(f"\nimage {image_bytes} B, base {base_bytes} B, over base {image_bytes - base_bytes} B")
    print(f"build took {trainer_image.build_seconds:.0f} s")
    assert image_bytes - base_bytes < SIZE_OVER_BASE_LIMIT_BYTES


def _registry_bytes(storage: Path) -> int:
    return sum(path.stat().st_size for path in storage.rglob("*") if path.is_file())


def _code_changed_context(tmp: Path) -> Path:
    """A copy of the build context whose trainer code differs by one line."""
    context = tmp / "context"
    context.mkdir()
    for name in IMAGE_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / name)
    init = context / "trainer" / "__init__.py"
    init.write_text(init.read_text() + f"\n# code-only change {time.time_ns()}\n")
    return context


@pytest.fixture
def code_changed_image(docker_engine, trainer_image, tmp_path) -> Iterator[TrainerImage]:
    tag = f"{trainer_image.tag}-code-change"
    context = _code_changed_context(tmp_path)
    yield build_trainer_image(docker_engine, trainer_image.base, context=context, tag=tag)
    docker_engine.run(["image", "rm", tag], timeout_seconds=300, check=False)


def test_code_only_change_pushes_under_a_megabyte(
    docker_engine, registry, trainer_image, code_changed_image
):
    pushed: list[str] = []
    try:
        for image in (trainer_image, code_changed_image):
            remote = f"{registry.address}/glucose-training/trainer:{image.tag.split(':')[1]}"
            docker_engine.run(["tag", image.tag, remote], timeout_seconds=60)
            pushed.append(remote)
            before = _registry_bytes(registry.storage_dir)
            docker_engine.run(["push", remote], timeout_seconds=CONTAINER_TIMEOUT_SECONDS)
            added = _registry_bytes(registry.storage_dir) - before
        print(f"\nrebuild for a code-only change: {code_changed_image.build_seconds:.0f} s")
        print(f"bytes pushed for a code-only change: {added}")
        assert added < CODE_CHANGE_PUSH_LIMIT_BYTES
    finally:
        for remote in pushed:
            docker_engine.run(["image", "rm", remote], timeout_seconds=120, check=False)


def test_image_trains_with_the_run_dir_on_a_volume(docker_engine, trainer_image, dataset, tmp_path):
    runs = _shared_dir(tmp_path / RUN_ID)
    result = _trainer(
        docker_engine, trainer_image.tag,
        "train", "--data", DATA_MOUNT, "--run-dir", RUN_MOUNT,
        "--epochs", "1", "--batch-size", "32", "--max-steps", "3", "--log-every", "1",
        volumes={dataset: f"{DATA_MOUNT}:ro", runs: RUN_MOUNT},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "device:" in result.stdout  # the GPU/driver/CUDA line, CPU here
    assert (runs / "checkpoints" / "last.pt").is_file()
    assert json.loads((runs / "status.json").read_text())["step"] == 3


def _status_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("step") or 0
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def _wait_for_step(run_dir: Path, step: int) -> None:
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while _status_step(run_dir) < step:
        assert time.monotonic() < deadline, f"no step {step} within {STEP_WAIT_SECONDS} s"
        time.sleep(2)


def _s3_keys(moto_server, uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    client = moto_server.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def _train_args(uri: str, *extra: str) -> list[str]:
    return [
        "train", "--data", DATA_MOUNT, "--run-dir", RUN_MOUNT, "--checkpoint-uri", uri,
        "--epochs", "50", "--batch-size", "32", "--log-every", "1", *extra,
    ]  # fmt: skip


def test_docker_stop_checkpoints_to_s3_exits_75_and_a_new_container_resumes(
    docker_engine, trainer_image, dataset, moto_server, tmp_path
):
    uri = f"{moto_server.create_bucket()}/{RUN_ID}"
    env = [arg for name, value in moto_server.env.items() for arg in ("-e", f"{name}={value}")]
    first_runs = _shared_dir(tmp_path / "first" / RUN_ID)
    name = f"glucose-image-e2e-{os.getpid()}"
    docker_engine.run(
        ["run", "--detach", "--name", name, "--network", "host", *env,
         "-v", f"{dataset}:{DATA_MOUNT}:ro", "-v", f"{first_runs}:{RUN_MOUNT}",
         trainer_image.tag, *_train_args(uri)],
        timeout_seconds=CONTAINER_TIMEOUT_SECONDS,
    )  # fmt: skip
    try:
        _wait_for_step(first_runs, STEPS_BEFORE_STOP)
        docker_engine.run(
            ["stop", "-t", str(STOP_GRACE_SECONDS), name],
            timeout_seconds=STOP_GRACE_SECONDS + 60,
        )
        state = _inspect_container(docker_engine, name)
    finally:
        docker_engine.run(["rm", "--force", name], timeout_seconds=300, check=False)
    assert state["ExitCode"] == EXIT_PREEMPTED
    stopped_at = _status_step(first_runs)
    assert any(key.endswith(".pt") for key in _s3_keys(moto_server, uri))

    # A fresh volume: the only way back is the checkpoint in S3.
    second_runs = _shared_dir(tmp_path / "second" / RUN_ID)
    result = docker_engine.run(
        ["run", "--rm", "--network", "host", *env,
         "-v", f"{dataset}:{DATA_MOUNT}:ro", "-v", f"{second_runs}:{RUN_MOUNT}",
         trainer_image.tag, *_train_args(uri, "--max-steps", str(stopped_at + 2))],
        timeout_seconds=CONTAINER_TIMEOUT_SECONDS, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert f"resume: step {stopped_at}," in result.stdout
    assert _status_step(second_runs) == stopped_at + 2


def _inspect_container(engine: DockerEngine, name: str) -> dict:
    result = engine.run(["inspect", name], timeout_seconds=60)
    return json.loads(result.stdout)[0]["State"]
