"""Two "boxes" as `fab train` starts them (ops.run.container.docker_run_command for
a stack of two), each a real container of the real image on the real Docker engine,
meeting over c10d on 127.0.0.1/127.0.0.2 through their node names in /etc/hosts:
`docker stop` of box 0 reaches torchrun and the workers, and both containers exit 75.
CPU and gloo (this machine has no GPU)."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path

import pytest

from ops.run.container import Launch, container_name, docker_run_command
from ops.run.distributed import RENDEZVOUS_PORT, DistributedLaunch
from ops.target.schema import Target
from tests.fixtures.docker_engine import DockerEngine
from tests.local_server import free_port
from trainer.checkpoints import checkpoint_file

pytestmark = pytest.mark.e2e

RUN_ID = "launch-e2e"
STOP_GRACE_SECONDS = 120
STEP_WAIT_SECONDS = 300
TRAINER_ARGS = ("--model", "resnet18", "--batch-size", "8", "--epochs", "50", "--log-every", "1")
# The boxes' private addresses: two loopback addresses of this one machine.
ADDRESSES = ("127.0.0.1", "127.0.0.2")


def _box_root(tmp_path: Path, node: int) -> Path:
    """BOX_ROOT of box `node`, writable by the image's user (uid 10001)."""
    root = tmp_path / f"box-{node}"
    for sub in (f"runs/{RUN_ID}", "datasets"):
        (root / sub).mkdir(parents=True)
        (root / sub).chmod(0o777)
    return root


def _docker_run(image: str, root: Path, node: int, port: int) -> list[str]:
    """What `fab train` runs on box `node`, with a free rendezvous port and one thread."""
    target = Target(cloud="aws", hosts=("54.1.2.3",), ssh_user="ubuntu",
                    storage_uri="file:///tmp/store", source="test",
                    box_root=str(root), private_hosts=ADDRESSES)  # fmt: skip
    plan = DistributedLaunch(RUN_ID, 1, ADDRESSES, node)
    launch = Launch(RUN_ID, image, "tiny", TRAINER_ARGS, plan)
    argv = shlex.split(docker_run_command(target, launch, gpus=False, user="10001:10001"))
    argv = [a.replace(f":{RENDEZVOUS_PORT}", f":{port}") for a in argv]
    # Each box's own name (one machine: names, not box roots, tell the containers apart).
    argv[argv.index(container_name(RUN_ID))] = f"{container_name(RUN_ID)}-box-{node}"
    options = ["--env", "OMP_NUM_THREADS=1", "--env", "GLUCOSE_IMDS_URL=off"]
    return [argv[1], *options, *argv[2:]]  # docker run ...


def _wait_for(path: Path, pattern: str) -> str:
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if pattern in text:
            return text
        time.sleep(0.5)
    raise AssertionError(f"{path} never held {pattern!r}")


def test_docker_stop_of_box_0_stops_both_boxes_with_exit_75(
    docker_engine: DockerEngine, trainer_image, tiny_data: Path, tmp_path: Path
) -> None:
    roots = [_box_root(tmp_path, node) for node in (0, 1)]
    for root in roots:  # the dataset cache fab train fills on every box
        shutil.copytree(tiny_data, root / "datasets" / "tiny")
        (root / "datasets" / "tiny").chmod(0o755)
    names = [f"{container_name(RUN_ID)}-box-{node}" for node in (0, 1)]
    port = free_port()
    started = time.monotonic()
    try:
        for node in (1, 0):  # box 1 waits for box 0's store
            docker_engine.run(_docker_run(trainer_image.tag, roots[node], node, port),
                              timeout_seconds=120)  # fmt: skip
        hosts = docker_engine.run(["exec", names[1], "cat", "/etc/hosts"], timeout_seconds=60)
        assert "127.0.0.2\tglucose-node-01" in hosts.stdout
        run_dirs = [root / "runs" / RUN_ID for root in roots]
        _wait_for(run_dirs[0] / "status.json", '"step": 2')
        _wait_for(run_dirs[1] / "heartbeat.json", '"step"')
        docker_engine.run(["stop", "-t", str(STOP_GRACE_SECONDS), names[0]], timeout_seconds=180)
        codes = []
        for name in names:
            docker_engine.run(["wait", name], timeout_seconds=180)
            state = docker_engine.run(["inspect", name], timeout_seconds=60).stdout
            codes.append(json.loads(state)[0]["State"]["ExitCode"])
        logs = [docker_engine.run(["logs", n], timeout_seconds=60).stderr for n in names]
        assert codes == [75, 75], logs
        status = json.loads((run_dirs[0] / "status.json").read_text())
        assert status["state"] == "stopped"
        heartbeat = json.loads((run_dirs[1] / "heartbeat.json").read_text())
        assert (heartbeat["state"], heartbeat["exit_code"]) == ("stopped", 75)
        # Saved at the stop's step (an epoch's end on the way may have saved too).
        *_, saved = sorted((run_dirs[0] / "checkpoints").glob(checkpoint_file.STEP_FILE_GLOB))
        assert checkpoint_file.load(saved)["step"] == status["step"]
        assert sorted(p.name for p in run_dirs[1].iterdir()) == ["heartbeat.json"]
        print(f"two containers, started to both stopped: {time.monotonic() - started:.0f} s")
    finally:
        docker_engine.run(["rm", "--force", *names], timeout_seconds=120, check=False)
