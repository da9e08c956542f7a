"""The boxes' dynamic resource, its provider shipped the way Pulumi ships it (dill,
base64) and run in a fresh Python process outside the program's directory, as Pulumi's
provider host runs it, against moto's EC2: launch through a fleet, read the boxes
back after a resize, and destroy them, a persistent spot request cancelled first."""

from __future__ import annotations

import pytest

from infra.aws.boxes import boxes_provider
from tests.fakes.provider_host import run_in_provider_host

BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
G6 = {"size": "g6.xlarge", "zone": "us-east-1a", "market": "on-demand"}
G5 = {"size": "g5.xlarge", "zone": "us-east-1a", "market": "on-demand"}
DROPPED = {**G5, "zone": "us-east-1c", "refusal": "not sold in us-east-1c"}


def _props(ec2, **more) -> dict:
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.16.0/24", AvailabilityZone="us-east-1a")
    group = ec2.create_security_group(GroupName="ssh", Description="ssh", VpcId=vpc)["GroupId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="glucose-box-template", LaunchTemplateData={"ImageId": image}
    )["LaunchTemplate"]
    return {
        "region": "us-east-1",
        "profile": "",
        "launchTemplateId": template["LaunchTemplateId"],
        "launchTemplateVersion": "1",
        "count": 1,
        "candidates": [G6, G5],
        "dropped": [DROPPED],
        "subnets": {"us-east-1a": subnet["Subnet"]["SubnetId"]},
        "groups": [[group]],
        "namePrefix": "glucose-box",
        "pinnedImageId": "",
        **more,
    }


def _host(account, tmp_path, method, *args):
    env = {**account.env, "PATH": "/usr/bin:/bin"}
    return run_in_provider_host(boxes_provider(), method, *args, env=env, cwd=tmp_path)


@pytest.mark.e2e
def test_create_launches_the_boxes_and_keeps_where_they_went(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    props = _props(ec2)
    created = _host(empty_aws_account, tmp_path, "create", props)
    outs = created["outs"]
    (instance_id,) = outs["instanceIds"]
    assert created["id"] == instance_id
    assert outs["placement"] == G6
    assert outs["placementTried"] == [
        {**G6, "refusal": ""},
        {**G5, "refusal": "not tried: an earlier candidate was taken"},
        DROPPED,
    ]
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    (instance,) = reservation["Instances"]
    assert outs["privateIps"] == [instance["PrivateIpAddress"]]
    assert {"Key": "Name", "Value": "glucose-box-0"} in instance["Tags"]


@pytest.mark.e2e
def test_refresh_reads_the_size_a_resize_left(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    outs = _host(empty_aws_account, tmp_path, "create", _props(ec2))["outs"]
    (instance_id,) = outs["instanceIds"]
    ec2.stop_instances(InstanceIds=[instance_id])
    ec2.modify_instance_attribute(InstanceId=instance_id, InstanceType={"Value": "g5.xlarge"})
    read = _host(empty_aws_account, tmp_path, "read", instance_id, outs)
    assert read["outs"]["placement"] == {**G6, "size": "g5.xlarge"}


@pytest.mark.e2e
def test_destroy_cancels_the_persistent_request_before_the_box_goes(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    props = {"region": "us-east-1", "profile": "", "instanceIds": [request["InstanceId"]]}
    _host(empty_aws_account, tmp_path, "delete", request["InstanceId"], props)
    live = [
        r["SpotInstanceRequestId"]
        for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
        if r["State"] in ("open", "active", "disabled")
    ]
    assert live == []
    states = {
        i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
    }
    assert states == {"terminated"}


@pytest.mark.e2e
def test_without_the_cancel_a_terminated_spot_box_leaves_its_request_live(empty_aws_account):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    (after,) = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert after["State"] in ("open", "active", "disabled")  # what would launch an untracked box


def _diff(olds: dict, news: dict):
    return boxes_provider().diff("i-1", olds, news)


OLDS = {
    "region": "us-east-1",
    "launchTemplateId": "lt-1",
    "launchTemplateVersion": "1",
    "count": 2,
    "candidates": [G6, G5],
    "dropped": [],
    "pinnedImageId": "",
    "instanceIds": ["i-1", "i-2"],
    "placement": G6,
}


def test_reordering_the_candidates_or_a_new_template_version_replaces_nothing():
    news = {**OLDS, "candidates": [G5, G6], "launchTemplateVersion": "7"}
    news.pop("instanceIds")
    diff = _diff(OLDS, news)
    assert (diff.changes, diff.replaces) == (True, [])
    kept = boxes_provider().update("i-1", OLDS, news).outs
    assert kept["instanceIds"] == ["i-1", "i-2"] and kept["placement"] == G6
    assert kept["candidates"] == [G5, G6]


@pytest.mark.parametrize(
    ("key", "value"),
    [("count", 3), ("launchTemplateId", "lt-2"), ("pinnedImageId", "ami-0abc1234def567890")],
)
def test_another_count_template_or_pinned_image_replaces_the_boxes(key, value):
    assert _diff(OLDS, {**OLDS, key: value}).replaces == [key]


def test_the_same_inputs_change_nothing():
    assert _diff(OLDS, dict(OLDS)).changes is False


def _persistent_spot_box(ec2) -> dict:
    """A persistent spot request that stops, as the program makes one, once its box runs."""
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (request,) = ec2.request_spot_instances(
        Type="persistent",
        InstanceInterruptionBehavior="stop",
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"]
    (request,) = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"]
    return request
