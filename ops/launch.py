"""What `fab train` does on the box: image there, dataset cached, trainer started.

Each step is idempotent, so running `fab train --run ID` again after a stop (or a
failed start) picks up where the first call left off, and the trainer resumes from
its newest checkpoint at `--checkpoint-uri`.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from invoke.exceptions import Exit
from rich.console import Console

from ops import box_lease, dataset_manifest, trainer_container
from ops.box_images import box_has_image, load_on_box, pull_on_box
from ops.registry import login_for
from ops.remote import Box
from ops.trainer_container import Launch
from trainer.storage import storage_environment

LAUNCH_FILE = "launch.json"
# Written before the image is built and shipped, renewed before the dataset fetch.
START_UP_LEASE_MINUTES = 60
console = Console(stderr=True, soft_wrap=True)


@contextlib.contextmanager
def start_up_lease(box: Box, run_id: str) -> Iterator[Callable[[], None]]:
    """Keep the idle watchdog off while `fab train` prepares the box; yields `renew`.

    An image pull or a dataset fetch is no trainer, no GPU work and no SSH terminal,
    so without it a box idle for most of its limit stops mid-pull. Released when the
    trainer runs (its own start grace takes over) or start-up fails; a `fab` that
    dies leaves a lease that expires by itself.
    """
    name = f"train-{run_id}"

    def renew() -> None:
        reason = f"fab train --run {run_id}: starting"
        box_lease.write(box, name, START_UP_LEASE_MINUTES, reason)

    renew()
    try:
        yield renew
    finally:
        with contextlib.suppress(Exception):  # a lost box cannot be told; it expires anyway
            box_lease.release(box, name)


def ship_image(box: Box, local_name: str, remote_name: str | None) -> str:
    """Make the image present on the box; returns the name the box knows it by."""
    name = remote_name or local_name
    if box_has_image(box, name):
        console.print(f"the box already has {name}")
        return name
    if remote_name is not None:
        with console.status(f"pulling {name} on the box"):
            pull_on_box(box, name, login_for(box.target.registry), box.target.registry)
        return name
    report = load_on_box(box, local_name)
    console.print(
        f"loaded {local_name} on the box over SSH: {report.bytes_sent / 1e6:.0f} MB "
        f"in {report.seconds:.0f} s"
    )
    return name


def dataset_name_from_uri(data_uri: str) -> str:
    name = data_uri.rstrip("/").rsplit("/", 1)[-1]
    if not trainer_container.RUN_ID_PATTERN.match(name):
        raise Exit(f"--data-uri {data_uri}: last path part {name!r} is not a usable dataset name")
    return name


def fetch_dataset_on_box(box: Box, image: str, data_uri: str, user: str) -> str:
    """Cache the dataset under BOX_ROOT/datasets/<name>, verified by its manifest."""
    name = dataset_name_from_uri(data_uri)
    host_dir = trainer_container.dataset_dir(box.root, name)
    inside = f"/workspace/datasets/{name}"
    box.run(f"mkdir -p {shlex.quote(host_dir)}")
    # The image holds trainer.storage; of containerEnv the fetch gets what a storage
    # client reads. The fetch logic is ops/dataset_manifest.py itself, run as `-c`.
    source = Path(dataset_manifest.__file__).read_text()
    env = storage_environment(box.target.container_env)
    with trainer_container.one_shot_env_file(box, f"fetch-{name}", env) as env_file:
        command = shlex.join(
            [
                "docker", "run", "--rm",
                *trainer_container.container_options(box.target, user, env_file),
                "--volume", f"{host_dir}:{inside}",
                "--entrypoint", "python3", image, "-c", source, data_uri, inside,
            ]
        )  # fmt: skip
        with console.status(f"box fetching dataset {data_uri}"):
            result = box.run(command)
    console.print(result.stdout.strip().splitlines()[-1])
    return name


def busy_runs(box: Box, run_id: str) -> list[str]:
    return [other for other in trainer_container.run_ids(box, running_only=True) if other != run_id]


def write_launch_record(box: Box, launch: Launch) -> None:
    """BOX_ROOT/runs/<id>/launch.json: first start time (for cost) and what was launched."""
    path = f"{trainer_container.run_dir(box.root, launch.run_id)}/{LAUNCH_FILE}"
    record = {
        "run_id": launch.run_id,
        "image": launch.image,
        "dataset": launch.dataset_name,
        "trainer_args": list(launch.trainer_args),
        "started_at": time.time(),
        "hourly_price_usd": box.target.hourly_price_usd,
        "spot": box.target.spot,
    }
    # A resume keeps the first launch's record (and so its start time).
    if not box.exists(path):
        box.run(f"cat > {shlex.quote(path)}", stdin=json.dumps(record))


def start_trainer(box: Box, launch: Launch, user: str) -> None:
    """(Re)create the run's container; a stopped one of the same run is replaced."""
    state = trainer_container.inspect_container(box, launch.run_id)
    name = trainer_container.container_name(launch.run_id)
    if state is not None and (state.running or state.restarting):
        raise Exit(f"run {launch.run_id} is already running on {box.address}; see `fab status`")
    run_dir = trainer_container.run_dir(box.root, launch.run_id)
    box.run(f"mkdir -p {shlex.quote(run_dir)}")
    write_launch_record(box, launch)
    if box.target.container_env:
        env_file = trainer_container.run_env_file(box.root, launch.run_id)
        trainer_container.write_env_file(box, env_file, box.target.container_env)
    if state is not None:
        box.run(f"docker rm {shlex.quote(name)}")
    # Only with the old container gone: the box's resume unit must never find a
    # user-stopped container without its marker.
    box.run(f"rm -f {shlex.quote(run_dir)}/STOPPED_BY_USER")
    command = trainer_container.docker_run_command(
        box.target, launch, gpus=trainer_container.box_has_gpus(box), user=user
    )
    box.run(command)
