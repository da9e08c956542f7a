"""ops.distributed_launch: the torchrun argv for one box's GPUs and for several boxes,
checked against torchrun's own argument parser."""

import pytest

from ops.distributed_launch import (
    RENDEZVOUS_PORT,
    SHUTDOWN_TIMEOUT_SECONDS,
    DistributedLaunch,
)

TRAINER_ARGS = ("train", "--data", "/workspace/datasets/d", "--run-dir", "/workspace/runs/r")


def _parsed(argv: list[str]):
    """torchrun's own parser on our argv (torch only here, in the test)."""
    from torch.distributed.run import get_args_parser

    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    return get_args_parser().parse_args(argv[3:])


def test_one_box_runs_a_rank_per_gpu_with_a_standalone_rendezvous():
    argv = DistributedLaunch("r", gpus_per_box=8).argv(TRAINER_ARGS)
    args = _parsed(argv)
    assert (args.nproc_per_node, args.standalone, args.nnodes) == ("8", True, "1:1")
    assert args.module and args.training_script == "trainer"
    assert tuple(args.training_script_args) == TRAINER_ARGS


def test_boxes_meet_on_box_0s_private_address_under_the_run_id():
    launch = DistributedLaunch(
        "run-7", gpus_per_box=4, boxes=3, rendezvous_host="10.0.1.4", local_addr="10.0.1.9"
    )
    args = _parsed(launch.argv(TRAINER_ARGS))
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("3", "4", "c10d")
    assert args.rdzv_endpoint == f"10.0.1.4:{RENDEZVOUS_PORT}" and args.rdzv_id == "run-7"
    assert args.local_addr == "10.0.1.9" and not args.standalone
    assert launch.world_size == 12 and launch.env()["NCCL_IB_DISABLE"] == "1"


def test_every_restart_gets_a_fresh_rendezvous_store():
    for launch in (DistributedLaunch("r", 8), DistributedLaunch("r", 8, 2, "10.0.0.4", "10.0.0.5")):
        assert launch.env()["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "NCCL_IB_DISABLE" not in DistributedLaunch("r", 8).env()


def test_restarts_and_the_shutdown_grace_outlast_the_trainers_stop_budget():
    from trainer.loop.preemption import STOP_BUDGET_SECONDS  # torch-free module

    args = _parsed(DistributedLaunch("r", gpus_per_box=2, max_restarts=2).argv(TRAINER_ARGS))
    assert (args.max_restarts, args.shutdown_timeout) == (2, SHUTDOWN_TIMEOUT_SECONDS)
    assert STOP_BUDGET_SECONDS < SHUTDOWN_TIMEOUT_SECONDS < 120  # the container's stop timeout


@pytest.mark.parametrize(
    ("host", "local"), [(None, "10.0.0.5"), ("54.12.1.1", "10.0.0.5"), ("10.0.0.4", None)]
)
def test_several_boxes_refuse_a_missing_or_public_address(host, local):
    with pytest.raises(ValueError, match="private IP address"):
        DistributedLaunch("r", 8, boxes=2, rendezvous_host=host, local_addr=local)
