"""The boxes' dynamic resource, its provider shipped the way Pulumi ships it (dill,
base64) and run in a fresh Python process outside the program's directory, as Pulumi's
provider host runs it, against moto's EC2: launch through a fleet, read every box back
(after a resize, a loss, a relaunch by its spot request), and destroy them, every
persistent spot request cancelled first; and the diff Pulumi asks for at each `up`."""

from __future__ import annotations

import pytest

from infra.aws.boxes import boxes_provider
from stack.ec2_boxes import LAUNCH_TAG
from tests.fakes.provider_host import run_in_provider_host

BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
G6 = {"size": "g6.xlarge", "zone": "us-east-1a", "market": "on-demand"}
G5 = {"size": "g5.xlarge", "zone": "us-east-1a", "market": "on-demand"}
DROPPED = {**G5, "zone": "us-east-1c", "refusal": "not sold in us-east-1c"}
TAGS = {"project": "glucose-training", "stack": "dev", "cost-scope": "glucose-training/dev"}
LIVE = ("open", "active", "disabled")


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
        "groups": [[group]] * int(more.get("count", 1)),
        "namePrefix": "glucose-box",
        "pinnedImageId": "",
        "tags": TAGS,
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
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags.items() >= {**TAGS, "Name": "glucose-box-0", LAUNCH_TAG: outs["launchId"]}.items()


@pytest.mark.e2e
def test_refresh_reads_the_size_a_resize_left(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    outs = _host(empty_aws_account, tmp_path, "create", _props(ec2))["outs"]
    (instance_id,) = outs["instanceIds"]
    ec2.stop_instances(InstanceIds=[instance_id])
    ec2.modify_instance_attribute(InstanceId=instance_id, InstanceType={"Value": "g5.xlarge"})
    read = _host(empty_aws_account, tmp_path, "read", instance_id, outs)
    assert read["outs"]["placement"] == {**G6, "size": "g5.xlarge"}


def _live_requests(ec2) -> list[str]:
    return [
        r["SpotInstanceRequestId"]
        for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
        if r["State"] in LIVE
    ]


def _states(ec2) -> set[str]:
    return {
        i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
    }


def _spot_record(request: dict, launch_id: str = "") -> dict:
    """The resource's state for one spot box, as `create` records it."""
    return {
        "region": "us-east-1",
        "profile": "",
        "count": 1,
        "instanceIds": [request["InstanceId"]],
        "spotRequestIds": [request["SpotInstanceRequestId"]],
        "launchId": launch_id,
    }


@pytest.mark.e2e
def test_destroy_cancels_the_persistent_request_before_the_box_goes(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    props = {"region": "us-east-1", "profile": "", "instanceIds": [request["InstanceId"]]}
    _host(empty_aws_account, tmp_path, "delete", request["InstanceId"], props)
    assert _live_requests(ec2) == []
    assert _states(ec2) == {"terminated"}


@pytest.mark.e2e
def test_a_spot_stack_whose_box_was_terminated_by_hand_destroys_to_no_live_request(
    empty_aws_account, tmp_path
):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    assert _live_requests(ec2) == [request["SpotInstanceRequestId"]]  # it would relaunch
    _host(empty_aws_account, tmp_path, "delete", request["InstanceId"], _spot_record(request))
    assert _live_requests(ec2) == []


@pytest.mark.e2e
def test_destroy_cancels_a_request_known_only_by_the_launchs_tag(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2, launch_id="feedfacecafe0001")
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    # Described before EC2 had filled it in: no request id reached the record.
    props = {**_spot_record(request, "feedfacecafe0001"), "spotRequestIds": [""]}
    _host(empty_aws_account, tmp_path, "delete", request["InstanceId"], props)
    assert _live_requests(ec2) == []


@pytest.mark.e2e
def test_destroy_of_what_is_gone_already_succeeds_again(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    for _ in range(2):
        _host(empty_aws_account, tmp_path, "delete", request["InstanceId"], _spot_record(request))
    assert _live_requests(ec2) == [] and _states(ec2) == {"terminated"}


@pytest.mark.e2e
def test_without_the_cancel_a_terminated_spot_box_leaves_its_request_live(empty_aws_account):
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    (after,) = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
    assert after["State"] in LIVE  # what would launch an untracked box


# --- refresh --------------------------------------------------------------------------


@pytest.mark.e2e
def test_refresh_reads_every_box_and_a_lost_one_makes_the_next_up_replace_the_set(
    empty_aws_account, tmp_path
):
    ec2 = empty_aws_account.client("ec2")
    props = _props(ec2, count=2)
    outs = _host(empty_aws_account, tmp_path, "create", props)["outs"]
    box_0, box_1 = outs["instanceIds"]
    ec2.terminate_instances(InstanceIds=[box_1])
    read = _host(empty_aws_account, tmp_path, "read", box_0, outs)
    assert (read["id"], read["outs"]["instanceIds"]) == (box_0, [box_0])
    assert len(read["outs"]["privateIps"]) == 1
    assert boxes_provider().diff(box_0, read["outs"], props).replaces == ["count"]


@pytest.mark.e2e
def test_refresh_of_a_set_that_is_gone_drops_it_so_the_next_up_launches_it(
    empty_aws_account, tmp_path
):
    ec2 = empty_aws_account.client("ec2")
    outs = _host(empty_aws_account, tmp_path, "create", _props(ec2))["outs"]
    ec2.terminate_instances(InstanceIds=outs["instanceIds"])
    read = _host(empty_aws_account, tmp_path, "read", outs["instanceIds"][0], outs)
    assert read["id"] == ""  # Pulumi's "blank if missing"


@pytest.mark.e2e
def test_refresh_follows_a_spot_request_to_the_box_it_launched_again(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    first, again = _persistent_spot_box(ec2), _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[first["InstanceId"]])
    # As EC2 has it once the request relaunched the box: the request names the new one
    # (moto does not relaunch; the second request's box stands in for it).
    record = {**_spot_record(first), "spotRequestIds": [again["SpotInstanceRequestId"]]}
    read = _host(empty_aws_account, tmp_path, "read", first["InstanceId"], record)
    assert read["outs"]["instanceIds"] == [again["InstanceId"]]


@pytest.mark.e2e
def test_refresh_keeps_a_set_whose_spot_request_can_still_launch(empty_aws_account, tmp_path):
    # Dropped, nothing would cancel the request: the next `up` replaces the set instead.
    ec2 = empty_aws_account.client("ec2")
    request = _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    read = _host(empty_aws_account, tmp_path, "read", request["InstanceId"], _spot_record(request))
    assert (read["id"], read["outs"]["instanceIds"]) == (request["InstanceId"], [])
    inputs = {k: v for k, v in _spot_record(request).items() if k in ("region", "count")}
    assert boxes_provider().diff(read["id"], read["outs"], inputs).replaces == ["count"]


@pytest.mark.e2e
def test_an_import_is_refused_in_one_line_naming_why(empty_aws_account, tmp_path):
    ec2 = empty_aws_account.client("ec2")
    inputs = _props(ec2)  # what an import's read gets at best: inputs, no record
    env = {**empty_aws_account.env, "PATH": "/usr/bin:/bin"}
    with pytest.raises(AssertionError) as refused:
        run_in_provider_host(boxes_provider(), "read", "i-0abc", inputs, env=env, cwd=tmp_path)
    (line,) = [x for x in str(refused.value).splitlines() if "cannot be imported" in x]
    assert "pulumi/pulumi#16175" in line and "`pulumi up`" in line


# --- diff -----------------------------------------------------------------------------


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
    "tags": TAGS,
    "providerCode": "0123456789abcdef",
    "__provider": "pickled-here",
    "instanceIds": ["i-1", "i-2"],
    "imageId": "ami-0aaaaaaaaaaaaaaaa",
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


def test_a_provider_pickled_elsewhere_and_new_offerings_change_nothing():
    # The pickle holds the checkout's path; `dropped` is read from EC2 at each run.
    news = {**OLDS, "__provider": "pickled-in-another-checkout", "dropped": [DROPPED]}
    assert _diff(OLDS, news).changes is False


@pytest.mark.parametrize("pinned", ["", "ami-0aaaaaaaaaaaaaaaa"], ids=["unpinned", "booted"])
def test_pinning_the_image_the_boxes_boot_or_unpinning_it_changes_nothing(pinned):
    olds = {**OLDS, "pinnedImageId": "ami-0aaaaaaaaaaaaaaaa" if not pinned else ""}
    assert _diff(olds, {**olds, "pinnedImageId": pinned}).changes is False


def test_new_provider_code_is_an_update_that_keeps_the_boxes():
    diff = _diff(OLDS, {**OLDS, "providerCode": "fedcba9876543210"})
    assert (diff.changes, diff.replaces) == (True, [])


def _persistent_spot_box(ec2, launch_id: str = "") -> dict:
    """A persistent spot request that stops, as the program makes one, once its box runs."""
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tagged = [{"Key": LAUNCH_TAG, "Value": launch_id}] if launch_id else []
    (request,) = ec2.request_spot_instances(
        Type="persistent",
        InstanceInterruptionBehavior="stop",
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
        TagSpecifications=[{"ResourceType": "spot-instances-request", "Tags": tagged}]
        if tagged
        else [],
    )["SpotInstanceRequests"]
    (request,) = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"]
    return request
