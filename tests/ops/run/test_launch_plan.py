"""Which launch each box of a stack gets (ops.run.launch.distributed_plan): `train` alone
on one GPU of one box, torchrun over every GPU of every box otherwise."""

import pytest
from invoke.exceptions import Exit

from ops.run.launch import distributed_plan
from ops.target.schema import Target


def _target(**overrides) -> Target:
    values = {
        "cloud": "aws",
        "hosts": ("54.1.2.3",),
        "ssh_user": "ubuntu",
        "storage_uri": "s3://bucket/stack",
        "source": "stack dev",
    }
    return Target(**{**values, **overrides})


@pytest.mark.parametrize("gpus", [0, 1])
def test_one_box_of_one_gpu_or_none_runs_train_by_itself(gpus):
    # No torchrun, no process group: the container's exit code is the trainer's own.
    assert distributed_plan(_target(), "r", gpus, 0) is None


def test_one_box_of_8_gpus_runs_8_ranks_there():
    plan = distributed_plan(_target(), "r", 8, 0)
    assert (plan.boxes, plan.gpus_per_box, plan.world_size) == (1, 8, 8)


def test_every_box_of_a_stack_meets_on_the_private_addresses_in_rank_order():
    target = _target(private_hosts=("10.42.0.4", "10.42.0.9", "10.42.0.7"))
    plans = [distributed_plan(target, "r", 4, node) for node in range(3)]
    assert [plan.node for plan in plans] == [0, 1, 2]
    assert all(plan.addresses == target.private_hosts for plan in plans)
    assert plans[0].world_size == 12


def test_boxes_without_gpus_run_one_rank_each_on_gloo():
    target = _target(private_hosts=("10.42.0.4", "10.42.0.9"))
    assert distributed_plan(target, "r", 0, 1).gpus_per_box == 1


def test_boxes_known_only_by_public_addresses_are_refused_with_the_fix():
    target = _target(hosts=("54.1.2.3", "54.1.2.4"))  # a stack from before privateHosts
    with pytest.raises(Exit, match="privateHosts"):
        distributed_plan(target, "r", 8, 0)


def test_boxes_on_a_docker_network_of_their_own_cannot_meet():
    target = _target(private_hosts=("10.42.0.4", "10.42.0.9"), docker_network="bridge")
    with pytest.raises(Exit, match="needs the boxes' own network"):
        distributed_plan(target, "r", 8, 0)
