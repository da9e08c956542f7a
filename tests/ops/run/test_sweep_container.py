"""The sweep driver's `docker run` line, and the names the box and the image share."""

import shlex

from box import contract
from ops.remote.ssh import Box
from ops.run.sweep import docker_run_command
from ops.target.schema import Target
from trainer.sweep.spec import SweepSpec


def _args(*, gpus: bool = False, **target) -> list[str]:
    values = {"cloud": "aws", "hosts": ("10.0.0.1",), "ssh_user": "ubuntu",
              "storage_uri": "s3://bucket/stack", "source": "test",
              "box_root": "/var/lib/glucose-training", **target}  # fmt: skip
    spec = SweepSpec(
        sweep_id="sw1", dataset="synth", data_dir="/workspace/datasets/synth",
        runs_dir="/workspace/runs", storage_uri="s3://bucket/stack", params=["lr=1e-3,1e-2"],
        image="reg/glucose:abc",
    )  # fmt: skip
    return shlex.split(docker_run_command(Box(Target(**values)), spec, gpus=gpus, user="1000:1"))


def _value(args, flag):
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_the_driver_is_named_labelled_and_left_to_the_resume_unit():
    args = _args()
    assert _value(args, "--name") == ["glucose-sweep-sw1"]
    assert _value(args, "--label") == ["glucose-training.sweep=sw1"]
    assert _value(args, "--restart") == ["no"]
    assert _value(args, "--stop-timeout") == [str(contract.STOP_TIMEOUT_SECONDS)]
    assert args[-4:] == ["reg/glucose:abc", "sweep", "--dir", "/workspace/sweeps/sw1"]


def test_the_sweeps_folder_all_runs_and_read_only_the_dataset_and_box_records_are_mounted():
    assert _value(_args(), "--volume") == [
        "/var/lib/glucose-training/sweeps/sw1:/workspace/sweeps/sw1",
        "/var/lib/glucose-training/runs:/workspace/runs",
        "/var/lib/glucose-training/datasets/synth:/workspace/datasets/synth:ro",
        "/var/lib/glucose-training/watchdog:/workspace/box:ro",
    ]


def test_the_trials_see_the_boxs_boot_and_stop_records_to_count_their_dollars():
    assert "GLUCOSE_BOX_RECORDS=/workspace/box" in _value(_args(), "--env")


def test_container_env_reaches_the_driver_as_a_mounted_file_in_its_folder():
    args = _args(container_env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    assert "s3cr3t" not in " ".join(args)
    assert any("/sweeps/sw1/.container.env" in mount for mount in _value(args, "--mount"))


def test_gpus_only_on_a_gpu_box():
    assert "--gpus" not in _args()
    assert _value(_args(gpus=True), "--gpus") == ["all"]
