"""The `docker run` line of the trainer follows ARCHITECTURE.md's box contract."""

import shlex
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from ops.run.container import Launch, docker_run_command
from ops.run.distributed import DistributedLaunch
from ops.target.schema import Target


def _target(**overrides):
    values = {
        "cloud": "aws",
        "hosts": ("10.0.0.1",),
        "ssh_user": "ubuntu",
        "storage_uri": "s3://bucket/stack",
        "source": "test",
        "box_root": "/var/lib/glucose-training",
    }
    values.update(overrides)
    return Target(**values)


def _args(target, *, gpus=False, trainer_args=()):
    launch = Launch("r7", "reg/glucose:abc", "synthetic", trainer_args)
    return shlex.split(docker_run_command(target, launch, gpus=gpus, user="1000:1000"))


def _value(args, flag):
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_container_is_named_labelled_and_never_restarted_by_docker():
    args = _args(_target())
    assert _value(args, "--name") == ["glucose-train-r7"]
    assert _value(args, "--label") == ["glucose-training.run-id=r7"]
    assert _value(args, "--restart") == ["no"]  # the box's resume unit decides
    assert _value(args, "--stop-timeout") == ["120"]
    assert "--detach" in args


def test_run_dir_and_dataset_are_mounted_and_checkpoints_go_to_storage():
    args = _args(_target())
    assert _value(args, "--volume") == [
        "/var/lib/glucose-training/runs/r7:/workspace/runs/r7",
        "/var/lib/glucose-training/datasets/synthetic:/workspace/datasets/synthetic:ro",
        "/var/lib/glucose-training/watchdog:/workspace/box:ro",
        "/var/lib/glucose-training/runs:/workspace/box-runs:ro",
    ]
    trainer = args[args.index("reg/glucose:abc") + 1 :]
    assert trainer[:7] == [
        "train",
        "--data", "/workspace/datasets/synthetic",
        "--run-dir", "/workspace/runs/r7",
        "--checkpoint-uri", "s3://bucket/stack/runs/r7",
    ]  # fmt: skip


def test_the_trainer_sees_its_boxs_boot_and_stop_records_to_count_its_dollars():
    args = _args(_target())
    assert "GLUCOSE_BOX_RECORDS=/workspace/box" in _value(args, "--env")


def test_the_trainer_sees_the_boxs_other_runs_to_share_its_dollars_with_them():
    assert "GLUCOSE_BOX_RUNS=/workspace/box-runs" in _value(_args(_target()), "--env")


def test_gpus_are_requested_only_on_a_gpu_box():
    assert "--gpus" not in _args(_target())
    assert _value(_args(_target(), gpus=True), "--gpus") == ["all"]


def test_target_network_reaches_the_container():
    assert _value(_args(_target(docker_network="host")), "--network") == ["host"]


def test_container_env_is_a_mounted_file_never_a_docker_argument():
    target = _target(container_env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})
    args = _args(target)
    assert not any("s3cr3t" in arg for arg in args)
    assert _value(args, "--mount") == [
        "type=bind,source=/var/lib/glucose-training/runs/r7/.container.env,"
        "target=/run/glucose-training/env,readonly"
    ]
    assert "GLUCOSE_ENV_FILE=/run/glucose-training/env" in _value(args, "--env")


def test_without_container_env_nothing_is_mounted():
    assert _value(_args(_target()), "--mount") == []


def test_trainer_flags_follow_the_fixed_ones():
    args = _args(_target(), trainer_args=("--max-steps", "5"))
    assert args[-2:] == ["--max-steps", "5"]


def test_run_id_that_cannot_name_a_container_is_refused():
    with pytest.raises(Exit, match="run id 'bad/id' is not a usable run id"):
        Launch("bad/id", "img", "data")


def test_box_root_from_the_target_file_moves_every_mount():
    args = _args(_target(box_root=str(Path("/srv/box"))))
    assert all(v.startswith("/srv/box/") for v in _value(args, "--volume"))


def _plan_args(target, plan, *, gpus=True):
    launch = Launch("r7", "reg/glucose:abc", "synthetic", ("--epochs", "3"), plan)
    return shlex.split(docker_run_command(target, launch, gpus=gpus, user="1000:1000"))


def test_a_box_of_8_gpus_runs_torchrun_over_all_of_them_under_the_launcher():
    args = _plan_args(_target(), DistributedLaunch("r7", 8))
    image = args.index("reg/glucose:abc")
    assert args[image + 1 : image + 4] == ["launch", "--", "--nproc-per-node"]
    assert args[image + 4 : image + 6] == ["8", "--standalone"]
    trainer = args[args.index("-m", image) :]
    assert trainer[:4] == ["-m", "trainer", "train", "--data"]
    assert trainer[-2:] == ["--epochs", "3"]
    assert _value(args, "--gpus") == ["all"] and _value(args, "--shm-size") == ["2g"]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in [a.split("--env=")[-1] for a in args]
    assert "--network" not in args  # one box: docker's own network will do


def test_box_1_of_two_joins_box_0s_rendezvous_on_the_hosts_network():
    plan = DistributedLaunch("r7", 4, ("10.42.0.4", "10.42.0.9"), node=1)
    args = _plan_args(_target(), plan)
    assert _value(args, "--network") == ["host"]
    assert [a for a in args if a.startswith("--add-host=")] == [
        "--add-host=glucose-node-00:10.42.0.4",
        "--add-host=glucose-node-01:10.42.0.9",
    ]
    assert {"--env=NCCL_IB_DISABLE=1", "--env=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"} <= set(args)
    assert _value(args, "--rdzv-endpoint") == ["10.42.0.4:29400"]
    assert _value(args, "--local-addr") == ["glucose-node-01"]
    assert _value(args, "--rdzv-conf") == ["is_host=false"]
    assert _value(args, "--nnodes") == ["2"] and _value(args, "--nproc-per-node") == ["4"]


def test_the_trainer_is_told_where_its_mounts_are_on_the_box(monkeypatch):
    # What the trainer prints (`report in ...`) names the box's folder, not /workspace.
    from trainer.container_env import HOST_PATHS_VARIABLE, host_path

    args = _args(_target(box_root="/home/me/checkout/local/box"))
    (setting,) = [env for env in _value(args, "--env") if env.startswith(HOST_PATHS_VARIABLE)]
    monkeypatch.setenv(HOST_PATHS_VARIABLE, setting.split("=", 1)[1])
    assert host_path("/workspace/runs/r7/report.md") == (
        "/home/me/checkout/local/box/runs/r7/report.md"
    )
    assert host_path("/workspace/datasets/synthetic") == (
        "/home/me/checkout/local/box/datasets/synthetic"
    )
