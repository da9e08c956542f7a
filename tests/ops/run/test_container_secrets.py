"""containerEnv secrets on the box, against the real dockerd and the real trainer image:
in a 0600 file mounted read-only, loaded by the image's code, and absent from the
`docker run` line, `docker inspect` and the box's process list."""

from __future__ import annotations

import shlex
import stat
import uuid

import pytest

from ops.remote.ssh import Box
from ops.run import container, env_files, on_box
from ops.target.resolve import load_target_file
from trainer.container_env import ENV_FILE_VARIABLE

pytestmark = pytest.mark.e2e

LOADER = (
    "import os; from trainer.container_env import load_env_file; load_env_file(); "
    "print(os.environ['GLUCOSE_TEST_SECRET'])"
)


@pytest.fixture
def box(local_box, monkeypatch) -> Box:
    monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(local_box.known_hosts))
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    local_box.write_target(containerEnv={"GLUCOSE_TEST_SECRET": secret})
    return Box(load_target_file(local_box.target_file))


def test_container_env_reaches_the_container_but_not_docker_or_ps(box, trainer_image, local_box):
    secret = box.target.container_env["GLUCOSE_TEST_SECRET"]
    run_id = f"secrets-{uuid.uuid4().hex[:8]}"
    env_file = env_files.run_env_file(box.root, run_id)
    env_files.write_env_file(box, env_file, box.target.container_env)
    user = on_box.box_user(box)
    options = container.container_options(box.target, user, env_file)
    name = f"glucose-secrets-test-{run_id}"
    command = ["docker", "run", "--detach", "--name", name, *options]
    command += ["--entrypoint", "sleep", trainer_image.tag, "120"]
    line = shlex.join(command)
    assert secret not in line
    try:
        box.run(line)
        seen_inside = box.run(f"docker exec {name} python -c {shlex.quote(LOADER)}").stdout
        inspected = box.run(f"docker inspect {name}").stdout
        processes = box.run("ps -eo args").stdout
    finally:
        box.run(f"docker rm --force {name}", check=False)
    assert seen_inside.strip() == secret
    assert secret not in inspected
    assert f"{ENV_FILE_VARIABLE}=/run/glucose-training/env" in inspected
    assert secret not in processes
    mode = (local_box.root / "runs" / run_id / ".container.env").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600
