"""Nothing keeps billing after `pulumi destroy`: a persistent spot request is cancelled first.

The guard's provider is shipped the way Pulumi ships it (dill, base64) and run in a
fresh Python process outside the program's directory, as Pulumi's provider host runs
it, against moto's EC2: request a persistent spot box, destroy it in the engine's
order (guard first, then the instance), and find no live request and no instance.
"""

from __future__ import annotations

import pytest

from infra.aws.spot_requests import guard_provider
from tests.fakes import aws_program
from tests.fakes.provider_host import run_in_provider_host

GUARD = "pulumi-python:dynamic/glucose-training:SpotRequestGuard"
INSTANCE = "aws:ec2/instance:Instance"


def test_every_spot_box_gets_a_guard_that_goes_before_it():
    result = aws_program.run_stack(spot="true", nodeCount="2")
    instances = {r.id: r for r in result.of_type(INSTANCE)}
    guards = result.of_type(GUARD)
    assert len(guards) == 2
    for guard in guards:
        instance = instances[guard.inputs["instanceId"]]
        # Depending on the instance is what makes the engine delete the guard first.
        assert instance.urn in guard.dependencies
        assert guard.inputs["spotRequestId"] == instance.outputs["spotInstanceRequestId"]
        assert guard.inputs["region"] == aws_program.REGION


def test_on_demand_boxes_have_no_spot_guard():
    assert aws_program.run_stack().of_type(GUARD) == []


def test_a_replaced_box_replaces_its_guard_so_the_old_request_is_cancelled():
    provider = guard_provider()
    old = {"instanceId": "i-1", "spotRequestId": "sir-1", "region": "us-east-1", "profile": ""}
    new = {**old, "instanceId": "i-2", "spotRequestId": "sir-2"}
    diff = provider.diff("sir-1", old, new)
    assert diff.replaces == ["instanceId", "spotRequestId"]
    assert diff.delete_before_replace is False
    assert provider.diff("sir-1", old, dict(old)).changes is False


@pytest.mark.e2e
def test_destroy_cancels_the_persistent_request_before_the_instance_goes(
    empty_aws_account, tmp_path
):
    ec2 = empty_aws_account.client("ec2")
    request_id, instance_id = _persistent_spot_box(ec2)
    props = {
        "instanceId": instance_id,
        "spotRequestId": request_id,
        "region": "us-east-1",
        "profile": "",
    }
    env = {**empty_aws_account.env, "PATH": "/usr/bin:/bin"}
    created = run_in_provider_host(guard_provider(), "create", props, env=env, cwd=tmp_path)
    assert created["id"] == request_id
    # pulumi destroy: the guard (dependent) first, then pulumi-aws terminates the box.
    run_in_provider_host(guard_provider(), "delete", request_id, props, env=env, cwd=tmp_path)
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert _live_requests(ec2) == []
    assert _live_instances(ec2) == []


@pytest.mark.e2e
def test_without_the_guard_a_terminated_box_leaves_its_request_live(empty_aws_account):
    ec2 = empty_aws_account.client("ec2")
    request_id, instance_id = _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert _live_requests(ec2) == [request_id]  # what would launch an untracked box


@pytest.mark.e2e
def test_a_guard_of_a_request_already_gone_deletes_cleanly(empty_aws_account, tmp_path):
    env = {**empty_aws_account.env, "PATH": "/usr/bin:/bin"}
    props = {"instanceId": "i-0gone", "spotRequestId": "", "region": "us-east-1", "profile": ""}
    run_in_provider_host(guard_provider(), "delete", "i-0gone", props, env=env, cwd=tmp_path)


def _persistent_spot_box(ec2) -> tuple[str, str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (request,) = ec2.request_spot_instances(
        Type="persistent",
        InstanceInterruptionBehavior="stop",
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"]
    (request,) = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"]
    return request["SpotInstanceRequestId"], request["InstanceId"]


def _live_requests(ec2) -> list[str]:
    return [
        r["SpotInstanceRequestId"]
        for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
        if r["State"] in ("open", "active", "disabled")
    ]


def _live_instances(ec2) -> list[str]:
    return [
        i["InstanceId"]
        for page in ec2.describe_instances()["Reservations"]
        for i in page["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
