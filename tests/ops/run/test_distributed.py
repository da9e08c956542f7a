"""ops.run.distributed: the torchrun argv for one box's GPUs and for several boxes,
checked against torchrun's own argument parser."""

import pytest

from ops.run.distributed import (
    RENDEZVOUS_PORT,
    SHUTDOWN_TIMEOUT_SECONDS,
    DistributedLaunch,
    fabric_of,
    node_name,
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
    addresses = ("10.0.1.4", "10.0.1.9", "10.0.1.12")
    launch = DistributedLaunch("run-7", gpus_per_box=4, addresses=addresses, node=1)
    args = _parsed(launch.argv(TRAINER_ARGS))
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("3", "4", "c10d")
    assert args.rdzv_endpoint == f"10.0.1.4:{RENDEZVOUS_PORT}" and args.rdzv_id == "run-7"
    assert args.local_addr == "glucose-node-01" and not args.standalone
    assert args.rdzv_conf == "is_host=false"
    assert launch.world_size == 12 and launch.env()["NCCL_IB_DISABLE"] == "1"


def test_box_0_serves_the_rendezvous_store():
    launch = DistributedLaunch("r", 8, addresses=("10.0.1.4", "10.0.1.9"), node=0)
    assert _parsed(launch.argv(TRAINER_ARGS)).rdzv_conf == "is_host=true"


def test_node_names_sort_in_rank_order_and_map_to_each_boxs_address():
    # torch numbers the rendezvous' boxes in the order of their --local-addr: the names
    # sort as text in rank order, so rank 0 is box 0's (tests/trainer/loop/test_launcher.py).
    addresses = tuple(f"10.42.0.{4 + node}" for node in range(16))
    entries = DistributedLaunch("r", 1, addresses=addresses).host_entries()
    assert list(entries) == sorted(entries) == [node_name(node) for node in range(16)]
    assert entries["glucose-node-10"] == "10.42.0.14"
    assert DistributedLaunch("r", 8).host_entries() == {}


def test_in_the_container_torchrun_runs_under_the_launcher():
    launch = DistributedLaunch("r", gpus_per_box=2)
    assert launch.container_args(TRAINER_ARGS) == ["launch", "--", *launch.argv(TRAINER_ARGS)[3:]]


def test_every_restart_gets_a_fresh_rendezvous_store():
    two_boxes = DistributedLaunch("r", 8, addresses=("10.0.0.4", "10.0.0.5"))
    for launch in (DistributedLaunch("r", 8), two_boxes):
        assert launch.env()["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "NCCL_IB_DISABLE" not in DistributedLaunch("r", 8).env()


def test_restarts_and_the_shutdown_grace_outlast_the_trainers_stop_budget():
    from trainer.loop.preemption import STOP_BUDGET_SECONDS  # torch-free module

    args = _parsed(DistributedLaunch("r", gpus_per_box=2, max_restarts=2).argv(TRAINER_ARGS))
    assert (args.max_restarts, args.shutdown_timeout) == (2, SHUTDOWN_TIMEOUT_SECONDS)
    assert STOP_BUDGET_SECONDS < SHUTDOWN_TIMEOUT_SECONDS < 120  # the container's stop timeout


@pytest.mark.parametrize("addresses", [("54.12.1.1", "10.0.0.5"), ("10.0.0.4", "box-1")])
def test_several_boxes_refuse_a_public_or_unparsed_address(addresses):
    with pytest.raises(ValueError, match="private IP addresses"):
        DistributedLaunch("r", 8, addresses=addresses)


TWO_BOXES = ("10.0.0.4", "10.0.0.5")


def test_infiniband_is_left_on_between_boxes_that_have_it():
    # Azure ND: NCCL_IB_DISABLE=1 switched the InfiniBand the boxes paid for off.
    for size in ("Standard_ND96asr_v4", "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"):
        fabric = fabric_of(size, "azure")
        env = DistributedLaunch("r", 8, addresses=TWO_BOXES, fabric=fabric).env()
        assert fabric == "infiniband" and "NCCL_IB_DISABLE" not in env
        assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "NET")  # says which


@pytest.mark.parametrize(
    ("size", "cloud", "fabric"),
    [
        ("p4d.24xlarge", "aws", "efa"),  # no aws-ofi-nccl in the image: ENA sockets
        ("p5.48xlarge", "aws", "efa"),
        ("Standard_NC96ads_A100_v4", "azure", "ethernet"),
        ("g6.12xlarge", "aws", "ethernet"),
        ("", "local", "ethernet"),  # a local or lab target: no size
    ],
)
def test_ib_stays_off_between_boxes_without_infiniband(size, cloud, fabric):
    assert fabric_of(size, cloud) == fabric
    env = DistributedLaunch("r", 8, addresses=TWO_BOXES, fabric=fabric).env()
    assert env["NCCL_IB_DISABLE"] == "1"
