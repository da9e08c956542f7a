"""The boxes go to the first candidate EC2 can take them all on, in the stack's order.

Against moto's EC2 (instances, tags, groups, terminations are real there), with
canned CreateFleet answers where the order matters: moto ignores `Priority` and never
returns `Errors`, so it cannot say which candidate EC2 would refuse. A botocore
`before-call` hook answers the call as EC2 does (with instances moto launched, so
everything after sees them), another raises `InsufficientInstanceCapacity` on a
spot pool's RunInstances, another answers `InvalidInstanceID.NotFound` as EC2 does for
an instance it has just launched and does not know yet (eventual consistency).
"""

from __future__ import annotations

import datetime
import re

import boto3
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

from stack import ec2_boxes, ec2_launch
from stack.ec2_boxes import LAUNCH_TAG
from stack.ec2_launch import (
    LaunchError,
    LaunchReleased,
    LaunchSpec,
    fleet_request,
    launch,
    spot_request,
)
from stack.placement import NOT_TRIED, ON_DEMAND, SPOT, Candidate, refusal_code
from stack.spot_requests import find_requests, live

pytestmark = pytest.mark.e2e  # moto

ZONES = ("us-east-1a", "us-east-1b")
G6A, G6B = (
    Candidate("g6.xlarge", "us-east-1a", ON_DEMAND),
    Candidate("g6.xlarge", "us-east-1b", ON_DEMAND),
)
G5A, G5B = (
    Candidate("g5.xlarge", "us-east-1a", ON_DEMAND),
    Candidate("g5.xlarge", "us-east-1b", ON_DEMAND),
)
NO_ROOM = "We currently do not have sufficient g6.xlarge capacity in the Availability Zone"
STACK_TAGS = {"project": "glucose-training", "stack": "dev", "cost-scope": "glucose-training/dev"}
LAUNCH_ID = "0123456789abcdef"


@pytest.fixture
def ec2(empty_aws_account, monkeypatch):
    # EC2's eventual consistency is minutes at worst; here the retries need not wait.
    monkeypatch.setattr(ec2_boxes, "NOT_FOUND_FIRST_WAIT_SECONDS", 0.0)
    return empty_aws_account.client("ec2")


@pytest.fixture
def network(ec2):
    """A VPC with a subnet per zone, an SSH group and a nodes group, a launch template."""
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnets = {
        zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.42.{16 + n}.0/24", AvailabilityZone=zone)[
            "Subnet"
        ]["SubnetId"]
        for n, zone in enumerate(ZONES)
    }
    ssh, nodes = (
        ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
        for name in ("ssh", "nodes")
    )
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="glucose-box-template",
        LaunchTemplateData={"ImageId": image, "SecurityGroupIds": [ssh, nodes]},
    )["LaunchTemplate"]
    return {"subnets": subnets, "ssh": ssh, "nodes": nodes, "template": template, "image": image}


def _spec(network, candidates, count=1) -> LaunchSpec:
    full, inner = (network["ssh"], network["nodes"]), (network["nodes"],)
    return LaunchSpec(
        launch_template_id=network["template"]["LaunchTemplateId"],
        launch_template_version="1",
        count=count,
        candidates=tuple(candidates),
        subnets=network["subnets"],
        groups=(full, *[inner] * (count - 1)),
        name_prefix="glucose-box",
        tags=STACK_TAGS,
        launch_id=LAUNCH_ID,
    )


def _answer(status: int, parsed: dict):
    return AWSResponse("https://ec2.us-east-1.amazonaws.com/", status, {}, None), parsed


def _canned_fleet(
    ec2, network, taken: Candidate | None, errors: list[tuple[Candidate, str]], count=1
):
    """CreateFleet answers as EC2 does: `taken`'s instances (launched in moto, in its
    subnet) and an error per refused candidate. Records the requests it was sent."""
    sent: list[str] = []
    moto = boto3.client("ec2", region_name="us-east-1")  # no hooks: what EC2 launched

    def answer(**_):
        sent.append("CreateFleet")
        body = {"FleetId": "fleet-canned", "Errors": [], "Instances": []}
        for candidate, code in errors:
            body["Errors"].append(
                {
                    "LaunchTemplateAndOverrides": _overrides(network, candidate),
                    "Lifecycle": "on-demand",
                    "ErrorCode": code,
                    "ErrorMessage": NO_ROOM,
                }
            )
        if taken is not None:
            launched = moto.run_instances(
                ImageId=network["image"],
                InstanceType=taken.size,
                SubnetId=network["subnets"][taken.zone],
                MinCount=count,
                MaxCount=count,
            )["Instances"]
            body["Instances"].append(
                {
                    "LaunchTemplateAndOverrides": _overrides(network, taken),
                    "Lifecycle": "on-demand",
                    "InstanceIds": [i["InstanceId"] for i in launched],
                    "InstanceType": taken.size,
                }
            )
        return _answer(200, body)

    ec2.meta.events.register("before-call.ec2.CreateFleet", answer)
    return sent  # one entry per CreateFleet call


def _overrides(network, candidate: Candidate) -> dict:
    return {
        "LaunchTemplateSpecification": {
            "LaunchTemplateId": network["template"]["LaunchTemplateId"],
            "Version": "1",
        },
        "Overrides": {
            "InstanceType": candidate.size,
            "SubnetId": network["subnets"][candidate.zone],
        },
    }


def _live(ec2) -> list[str]:
    return [
        i["InstanceId"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def test_the_fleet_request_ranks_every_candidate_and_takes_all_boxes_or_none(network):
    spec = _spec(network, [G6A, G6B, G5A], count=2)
    request = fleet_request(spec, list(spec.candidates))
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert [(o["InstanceType"], o["SubnetId"], o["Priority"]) for o in overrides] == [
        ("g6.xlarge", network["subnets"]["us-east-1a"], 0.0),
        ("g6.xlarge", network["subnets"]["us-east-1b"], 1.0),
        ("g5.xlarge", network["subnets"]["us-east-1a"], 2.0),
    ]
    assert request["Type"] == "instant"
    assert request["OnDemandOptions"] == {
        "AllocationStrategy": "prioritized",
        "SingleInstanceType": True,
        "SingleAvailabilityZone": True,
        "MinTargetCapacity": 2,
    }
    assert request["TargetCapacitySpecification"]["TotalTargetCapacity"] == 2


def test_refused_candidates_are_recorded_in_order_and_the_third_takes_the_boxes(ec2, network):
    capacity = "InsufficientInstanceCapacity"
    sent = _canned_fleet(ec2, network, G5A, [(G6B, capacity), (G6A, capacity)])
    launched = launch(ec2, _spec(network, [G6A, G6B, G5A, G5B]))
    assert len(sent) == 1
    assert launched.taken == G5A
    assert [(t.candidate, refusal_code(t.refusal)) for t in launched.tried] == [
        (G6A, capacity),
        (G6B, capacity),
        (G5A, ""),
        (G5B, NOT_TRIED),
    ]
    (instance,) = ec2.describe_instances(InstanceIds=launched.instance_ids)["Reservations"][0][
        "Instances"
    ]
    assert {"Key": "Name", "Value": "glucose-box-0"} in instance["Tags"]


def test_every_instance_returned_is_used_even_with_errors_beside_them(ec2, network):
    _canned_fleet(ec2, network, G6B, [(G6A, "InsufficientInstanceCapacity")], count=2)
    launched = launch(ec2, _spec(network, [G6A, G6B], count=2))
    assert len(launched.instance_ids) == 2 and launched.taken == G6B
    assert sorted(_live(ec2)) == sorted(launched.instance_ids)


def test_no_instance_and_no_exception_is_a_failure_naming_every_candidate(ec2, network):
    _canned_fleet(ec2, network, None, [(G6A, "InsufficientInstanceCapacity")])
    with pytest.raises(LaunchError) as info:
        launch(ec2, _spec(network, [G6A, G5A]))
    message = str(info.value)
    assert "no candidate could take 1 box(es)" in message
    assert f"g6.xlarge us-east-1a on-demand: InsufficientInstanceCapacity: {NO_ROOM}" in message
    assert "g5.xlarge us-east-1a on-demand: refused by EC2 Fleet, which gave no reason" in message
    assert "fallbackVmSizes or zones" in message
    assert _live(ec2) == []


def test_fewer_boxes_than_asked_are_terminated_and_refused(ec2, network):
    # MinTargetCapacity should prevent it; a half-launched cluster must not bill.
    _canned_fleet(ec2, network, G6A, [], count=1)
    with pytest.raises(LaunchError, match="only 1 of 2 boxes launched"):
        launch(ec2, _spec(network, [G6A], count=2))
    assert _live(ec2) == []


def test_box_1_of_two_leaves_the_ssh_group(ec2, network):
    _canned_fleet(ec2, network, G6A, [], count=2)
    launched = launch(ec2, _spec(network, [G6A], count=2))
    groups = {
        i["InstanceId"]: {g["GroupId"] for g in i["SecurityGroups"]}
        for r in ec2.describe_instances(InstanceIds=launched.instance_ids)["Reservations"]
        for i in r["Instances"]
    }
    assert groups[launched.instance_ids[1]] == {network["nodes"]}


def test_moto_launches_a_real_fleet_on_the_first_override(ec2, network):
    # Without canned answers: the request is one EC2's model accepts and moto serves.
    launched = launch(ec2, _spec(network, [G6A, G5A]))
    (instance,) = ec2_launch.describe(ec2, launched.instance_ids)
    assert (instance["InstanceType"], instance["Placement"]["AvailabilityZone"]) == (
        "g6.xlarge",
        "us-east-1a",
    )


def _spot_refusals(ec2, refused: set[str]) -> list[dict]:
    """RunInstances of a refused pool (size in `refused`) raises InsufficientInstanceCapacity."""
    sent: list[dict] = []

    def record(params, **_):
        sent.append(dict(params))

    def answer(**_):
        if sent[-1]["InstanceType"] in refused:
            error = {"Error": {"Code": "InsufficientInstanceCapacity", "Message": NO_ROOM}}
            return _answer(500, error)
        return None  # moto launches it

    ec2.meta.events.register("before-parameter-build.ec2.RunInstances", record)
    ec2.meta.events.register("before-call.ec2.RunInstances", answer)
    return sent


def test_spot_pools_are_tried_in_order_as_persistent_requests_that_stop(ec2, network):
    first, second = (
        Candidate("g6.xlarge", "us-east-1a", SPOT),
        Candidate("g5.xlarge", "us-east-1b", SPOT),
    )
    sent = _spot_refusals(ec2, {"g6.xlarge"})
    launched = launch(ec2, _spec(network, [first, second], count=2))
    assert launched.taken == second
    assert [p["InstanceType"] for p in sent] == ["g6.xlarge", "g5.xlarge"]
    request = sent[1]
    assert (request["MinCount"], request["MaxCount"]) == (2, 2)
    assert request["SubnetId"] == network["subnets"]["us-east-1b"]
    options = request["InstanceMarketOptions"]
    assert options["MarketType"] == "spot"
    assert options["SpotOptions"]["SpotInstanceType"] == "persistent"
    assert options["SpotOptions"]["InstanceInterruptionBehavior"] == "stop"
    until = datetime.datetime.strptime(options["SpotOptions"]["ValidUntil"], "%Y-%m-%dT%H:%M:%SZ")
    left = until.replace(tzinfo=datetime.timezone.utc) - datetime.datetime.now(
        datetime.timezone.utc
    )
    assert datetime.timedelta(days=364) < left <= datetime.timedelta(days=365)
    assert launched.tried[0].refusal.startswith("InsufficientInstanceCapacity")


def test_spot_fallback_goes_on_demand_after_the_last_spot_pool(ec2, network):
    spot = Candidate("g6.xlarge", "us-east-1a", SPOT)
    _spot_refusals(ec2, {"g6.xlarge"})
    sent = _canned_fleet(ec2, network, G6A, [])
    launched = launch(ec2, _spec(network, [spot, G6A]))
    assert launched.taken == G6A and len(sent) == 1
    assert [t.candidate.market for t in launched.tried] == [SPOT, ON_DEMAND]


def test_a_spot_refusal_that_is_no_capacity_or_quota_fails_at_once(ec2, network):
    def answer(**_):
        return _answer(400, {"Error": {"Code": "InvalidParameterValue", "Message": "bad"}})

    ec2.meta.events.register("before-call.ec2.RunInstances", answer)
    spot = Candidate("g6.xlarge", "us-east-1a", SPOT)
    with pytest.raises(Exception, match="InvalidParameterValue"):
        launch(ec2, _spec(network, [spot, Candidate("g5.xlarge", "us-east-1a", SPOT)]))


# --- what the launch request carries ------------------------------------------------


def _tags_of(specification: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in specification["Tags"]}


def _model_problems(operation: str, request: dict) -> list[str]:
    """`request` against EC2's model (types, required), and each ResourceType's enum."""
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("ec2").operation_model(operation)
    report = ParamValidator().validate(request, model.input_shape)
    kinds = model.input_shape.members["TagSpecifications"].member.members["ResourceType"].enum
    wrong = [
        t["ResourceType"] for t in request["TagSpecifications"] if t["ResourceType"] not in kinds
    ]
    return ([report.generate_report()] if report.has_errors() else []) + wrong


def test_a_spot_launch_tags_its_instances_volumes_and_requests_in_the_request_itself(network):
    request = spot_request(_spec(network, [G6A]), Candidate("g6.xlarge", "us-east-1a", SPOT))
    tagged = {t["ResourceType"]: _tags_of(t) for t in request["TagSpecifications"]}
    expected = {**STACK_TAGS, LAUNCH_TAG: LAUNCH_ID}
    assert tagged == {kind: expected for kind in ("instance", "volume", "spot-instances-request")}
    assert _model_problems("RunInstances", request) == []


def test_a_fleet_tags_its_instances_in_the_request_itself(network):
    request = fleet_request(_spec(network, [G6A, G5A]), [G6A, G5A])
    (instances,) = request["TagSpecifications"]
    assert (instances["ResourceType"], _tags_of(instances)) == (
        "instance",
        {**STACK_TAGS, LAUNCH_TAG: LAUNCH_ID},
    )
    assert _model_problems("CreateFleet", request) == []


def test_each_launch_call_has_its_own_client_token_so_a_retry_launches_nothing_twice(network):
    spec = _spec(network, [G6A])
    pools = [Candidate("g6.xlarge", zone, SPOT) for zone in ZONES]
    tokens = [spot_request(spec, p)["ClientToken"] for p in pools]
    tokens.append(fleet_request(spec, [G6A])["ClientToken"])
    assert len(set(tokens)) == 3 and all(t.startswith(LAUNCH_ID) and len(t) <= 64 for t in tokens)


def test_the_boxes_a_fleet_launched_carry_the_stack_and_launch_tags(ec2, network):
    launched = launch(ec2, _spec(network, [G6A]))
    (instance,) = ec2_launch.describe(ec2, launched.instance_ids)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags.items() >= {**STACK_TAGS, LAUNCH_TAG: LAUNCH_ID, "Name": "glucose-box-0"}.items()


# --- EC2 does not know the boxes yet -------------------------------------------------


def _not_found(ec2, operation: str, times: int | None) -> list[str]:
    """`operation` answers InvalidInstanceID.NotFound `times` times (None: always), as EC2
    may right after a launch; the calls it saw."""
    calls: list[str] = []

    def answer(**_):
        calls.append(operation)
        if times is None or len(calls) <= times:
            error = {"Code": "InvalidInstanceID.NotFound", "Message": "does not exist"}
            return _answer(400, {"Error": error})
        return None

    ec2.meta.events.register(f"before-call.ec2.{operation}", answer)
    return calls


def test_naming_a_box_ec2_does_not_know_yet_is_retried_until_it_does(ec2, network):
    calls = _not_found(ec2, "CreateTags", times=2)
    launched = launch(ec2, _spec(network, [G6A]))
    (instance,) = ec2_launch.describe(ec2, launched.instance_ids)
    assert {"Key": "Name", "Value": "glucose-box-0"} in instance["Tags"]
    assert len(calls) == 3


def test_moving_box_1_out_of_the_ssh_group_is_retried_until_ec2_knows_it(ec2, network):
    _canned_fleet(ec2, network, G6A, [], count=2)
    calls = _not_found(ec2, "ModifyInstanceAttribute", times=1)
    launched = launch(ec2, _spec(network, [G6A], count=2))
    (box_1,) = ec2_launch.describe(ec2, launched.instance_ids[1:])
    assert {g["GroupId"] for g in box_1["SecurityGroups"]} == {network["nodes"]}
    assert len(calls) == 2


def test_boxes_ec2_never_comes_to_know_are_released_before_the_launch_fails(ec2, network):
    calls = _not_found(ec2, "CreateTags", times=None)
    _canned_fleet(ec2, network, G6A, [], count=2)
    with pytest.raises(LaunchReleased) as info:
        launch(ec2, _spec(network, [G6A], count=2))
    assert len(calls) == ec2_boxes.NOT_FOUND_TRIES  # bounded
    released = [i for i in _all(ec2) if i not in _live(ec2)]
    assert len(released) == 2 and _live(ec2) == []
    message = str(info.value)
    assert "InvalidInstanceID.NotFound" in message and "\n" not in message
    assert f"released them: terminated {', '.join(sorted(released))}" in message


def _spot_as_ec2_launches_it(ec2, network) -> None:
    """RunInstances of a spot pool answered as EC2 does: a persistent request per box,
    tagged as the request says, each with its instance (moto's RunInstances makes none)."""
    moto = boto3.client("ec2", region_name="us-east-1")  # no hooks: what EC2 launched
    sent: list[dict] = []

    def record(params, **_):
        sent.append(dict(params))

    def answer(**_):
        params = sent[-1]
        (tagged,) = [
            t for t in params["TagSpecifications"] if t["ResourceType"] == "spot-instances-request"
        ]
        made = moto.request_spot_instances(
            Type="persistent",
            InstanceInterruptionBehavior="stop",
            InstanceCount=params["MaxCount"],
            LaunchSpecification={
                "ImageId": network["image"],
                "InstanceType": params["InstanceType"],
                "SubnetId": params["SubnetId"],
            },
            TagSpecifications=[tagged],
        )["SpotInstanceRequests"]
        requests = moto.describe_spot_instance_requests(
            SpotInstanceRequestIds=[r["SpotInstanceRequestId"] for r in made]
        )["SpotInstanceRequests"]
        instances = [
            {"InstanceId": r["InstanceId"], "SpotInstanceRequestId": r["SpotInstanceRequestId"]}
            for r in requests
        ]
        return _answer(200, {"Instances": instances})

    ec2.meta.events.register("before-parameter-build.ec2.RunInstances", record)
    ec2.meta.events.register("before-call.ec2.RunInstances", answer)


def test_a_spot_launch_that_cannot_be_settled_cancels_its_requests_and_terminates(ec2, network):
    _spot_as_ec2_launches_it(ec2, network)
    _not_found(ec2, "CreateTags", times=None)
    spot = Candidate("g6.xlarge", "us-east-1a", SPOT)
    with pytest.raises(LaunchReleased) as info:
        launch(ec2, _spec(network, [spot], count=2))
    cancelled = set(re.findall(r"sir-\w+", str(info.value).partition("cancelled")[2]))
    assert len(cancelled) == 2
    assert live(find_requests(ec2, cancelled)) == []
    assert _live(ec2) == []


def _all(ec2) -> list[str]:
    return [
        i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
    ]


def test_the_calls_an_older_stacks_provider_makes_still_let_go_of_its_spot_box(ec2, network):
    # A stack's state keeps the provider pickled at its last `up`; before the launch's
    # record and tag it read and destroyed through these two.
    (request,) = ec2.request_spot_instances(
        Type="persistent",
        InstanceInterruptionBehavior="stop",
        LaunchSpecification={"ImageId": network["image"], "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"]
    (request,) = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"]
    (described,) = ec2_launch.describe(ec2, [request["InstanceId"]])
    ec2_launch.release(ec2, [described["InstanceId"]])
    assert live(find_requests(ec2, [request["SpotInstanceRequestId"]])) == []
    assert _live(ec2) == []
