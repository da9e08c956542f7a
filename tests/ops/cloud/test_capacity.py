"""`fab start` when the cloud has no room: from the first choice, retry, resize in place,
or say the two ways out.

AWS against moto's EC2, with a botocore hook that answers StartInstances with a refusal
(`InsufficientInstanceCapacity`, `Unsupported`: moto always has room), so the retries and
the `ModifyInstanceAttribute` + start that follow are EC2's own calls; Azure against the
local fake of ARM, whose start answers 202 with an operation that ends `AllocationFailed`
(as ARM's does: the refusal is only there), and whose PATCH of the VM's `vmSize` answers
200 with an operation of its own. The clock and the sleep between tries are the test's,
so five minutes of retries take none.
"""

from __future__ import annotations

import time

import pytest
from botocore.awsrequest import AWSResponse
from invoke.exceptions import Exit

from ops.cloud import api as power
from ops.cloud import aws as power_aws
from ops.cloud import capacity
from ops.cloud.power import RUNNING, STARTING
from ops.target.resolve import from_outputs
from tests.fakes.arm import sku
from tests.fixtures.clouds import VM, target_outputs

NO_ROOM = (
    "We currently do not have sufficient g6.xlarge capacity in the Availability Zone you requested"
)
NOT_SUPPORTED = (
    "Your requested instance type (g6.xlarge) is not supported in your requested Availability "
    "Zone (us-east-1a)."
)
CAPACITY = "InsufficientInstanceCapacity"
TRIED_G6_G5 = [
    {"size": "g6.xlarge", "zone": "us-east-1a", "market": "on-demand", "refusal": ""},
    {"size": "g5.xlarge", "zone": "us-east-1a", "market": "on-demand", "refusal": "not tried"},
]


class Clock:
    """The test's time: each sleep moves it on."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _start(target, said, clock):
    cloud = power.cloud_api(target)
    return capacity.start(cloud, target, said.append, sleep=clock.sleep, clock=lambda: clock.now)


@pytest.fixture
def refusing_ec2(ec2, monkeypatch):
    """moto's EC2 for `fab`, whose StartInstances refuses the sizes in `refused` (size ->
    EC2's error code, a dict the test fills); every call's name recorded, and the sizes
    each StartInstances found the boxes on."""
    refused: dict[str, str] = {}
    calls: list[str] = []
    started_on: list[set[str]] = []

    def client(target, service):
        import boto3

        made = boto3.session.Session(region_name="us-east-1").client(service)
        made.meta.events.register("before-call.ec2.*", lambda model, **_: calls.append(model.name))
        made.meta.events.register("before-call.ec2.StartInstances", answer)
        return made

    def answer(params, **_):
        ids = [v for k, v in params["body"].items() if k.startswith("InstanceId.")]
        sizes = {
            i["InstanceType"]
            for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]
            for i in r["Instances"]
        }
        started_on.append(sizes)
        code = next((refused[size] for size in sizes if size in refused), None)
        if code:
            message = NO_ROOM if code == "InsufficientInstanceCapacity" else NOT_SUPPORTED
            error = {"Error": {"Code": code, "Message": message}}
            return AWSResponse("https://ec2.amazonaws.com/", 500, {}, None), error
        return None

    monkeypatch.setattr(power_aws, "_client", client)
    return refused, calls, started_on


def _stopped_boxes(ec2, count: int, size: str = "g6.xlarge", spot: bool = False) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    found = ec2.run_instances(
        ImageId=image,
        InstanceType=size,
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": "us-east-1a"},
        **extra,
    )
    ids = [i["InstanceId"] for i in found["Instances"]]
    ec2.stop_instances(InstanceIds=ids)
    return ids


def _no_room_for(refusing_ec2, ec2, *sizes: str) -> list[str]:
    """One stopped g6.xlarge box, and EC2 with no capacity for `sizes`."""
    refusing_ec2[0].update(dict.fromkeys(sizes, CAPACITY))
    return _stopped_boxes(ec2, 1)


def _aws_target(ids, **more):
    outputs = target_outputs(
        "aws", ids, **{"placementTried": TRIED_G6_G5, "vmSize": "g6.xlarge", **more}
    )
    return from_outputs(outputs, "stack test")


@pytest.mark.e2e
def test_a_capacity_refusal_is_tried_again_and_every_try_is_printed(refusing_ec2, ec2):
    refused, calls, _ = refusing_ec2
    ids = _stopped_boxes(ec2, 1)
    refused["g6.xlarge"] = CAPACITY
    clock, said = Clock(), []
    retries = []

    def sleep(seconds):
        retries.append(seconds)
        clock.now += seconds
        if len(retries) == 3:
            refused.clear()  # capacity came back

    after = capacity.start(
        power.cloud_api(_aws_target(ids)), _aws_target(ids), said.append,
        sleep=sleep, clock=lambda: clock.now,
    )  # fmt: skip
    assert {b.state for b in after} <= {RUNNING, STARTING}
    tries = [line for line in said if line.startswith("try ")]
    assert tries[:3] == [
        f"try {n}: g6.xlarge us-east-1a: InsufficientInstanceCapacity (capacity)" for n in (1, 2, 3)
    ]
    assert tries[3] == "try 4: g6.xlarge us-east-1a: started"
    assert retries == [capacity.RETRY_SECONDS] * 3
    assert "ModifyInstanceAttribute" not in calls
    assert said[-1].startswith("g6.xlarge us-east-1a on-demand $0.80/h (first choice)")


@pytest.mark.e2e
def test_after_the_wait_every_box_is_resized_in_place_to_the_next_size_and_started(
    refusing_ec2, ec2
):
    refused, calls, _ = refusing_ec2
    ids = _stopped_boxes(ec2, 2)
    refused["g6.xlarge"] = CAPACITY
    clock, said = Clock(), []
    after = _start(_aws_target(ids, capacityWaitMinutes=2), said, clock)
    assert {b.state for b in after} <= {RUNNING, STARTING}
    # Two minutes of tries 30 s apart, then the resize: same boxes, same zone.
    assert clock.slept == [capacity.RETRY_SECONDS] * 4
    described = [
        i for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]
    ]
    assert {(i["InstanceType"], i["Placement"]["AvailabilityZone"]) for i in described} == {
        ("g5.xlarge", "us-east-1a")
    }
    assert calls.count("ModifyInstanceAttribute") == 2
    assert (
        "resizing every box from g6.xlarge to g5.xlarge in place (zone us-east-1a, disk kept)"
        in said
    )
    assert said[-2] == (
        "g5.xlarge us-east-1a on-demand $1.01/h (fallback 2 of 2; g6.xlarge: "
        "InsufficientInstanceCapacity)"
    )


@pytest.mark.e2e
def test_a_spot_box_is_never_resized_and_the_end_names_both_ways_out(refusing_ec2, ec2):
    refused, calls, _ = refusing_ec2
    ids = _stopped_boxes(ec2, 1, spot=True)
    refused["g6.xlarge"] = CAPACITY
    with pytest.raises(Exit) as info:
        _start(_aws_target(ids, spot=True, capacityWaitMinutes=1), [], Clock())
    message = str(info.value)
    assert "a spot box keeps its size" in message
    assert "g6.xlarge us-east-1a    3 tries  InsufficientInstanceCapacity" in message
    assert "wait and run `fab start` again" in message and "`fab start --move`" in message
    assert "`fab train --run ID`" in message
    assert "ModifyInstanceAttribute" not in calls


@pytest.mark.e2e
def test_when_no_size_starts_the_table_lists_each_and_nothing_moves(refusing_ec2, ec2):
    refused, _, _ = refusing_ec2
    ids = _stopped_boxes(ec2, 1)
    refused.update({"g6.xlarge": CAPACITY, "g5.xlarge": CAPACITY})
    with pytest.raises(Exit) as info:
        _start(_aws_target(ids, capacityWaitMinutes=0), [], Clock())
    lines = str(info.value).splitlines()
    assert lines[0] == "stack test: the boxes did not start; every try:"
    assert lines[1].startswith("  g6.xlarge us-east-1a      1 try  InsufficientInstanceCapacity")
    assert lines[2].startswith("  g5.xlarge us-east-1a      1 try  InsufficientInstanceCapacity")
    (instance,) = ec2.describe_instances(InstanceIds=ids)["Reservations"][0]["Instances"]
    assert instance["Placement"]["AvailabilityZone"] == "us-east-1a"  # never without --move


@pytest.mark.e2e
def test_a_refusal_that_is_neither_capacity_nor_quota_stops_at_once(ec2, monkeypatch):
    def client(target, service):
        import boto3

        made = boto3.session.Session(region_name="us-east-1").client(service)
        made.meta.events.register(
            "before-call.ec2.StartInstances",
            lambda **_: (
                AWSResponse("https://ec2.amazonaws.com/", 400, {}, None),
                {"Error": {"Code": "IncorrectInstanceState", "Message": "not stopped"}},
            ),
        )
        return made

    monkeypatch.setattr(power_aws, "_client", client)
    ids = _stopped_boxes(ec2, 1)
    clock = Clock()
    with pytest.raises(Exit, match=r"refused to start g6\.xlarge \(IncorrectInstanceState"):
        _start(_aws_target(ids), [], clock)
    assert clock.slept == []


@pytest.mark.e2e
def test_boxes_left_on_a_fallback_size_start_on_the_first_choice_again(refusing_ec2, ec2):
    _, _, started_on = refusing_ec2
    ids = _stopped_boxes(ec2, 1, size="g5.xlarge")  # where last night's failover left it
    said: list[str] = []
    _start(_aws_target(ids), said, Clock())
    assert started_on == [{"g6.xlarge"}]
    assert (
        "resizing every box from g5.xlarge to g6.xlarge in place (zone us-east-1a, disk kept)"
        in said
    )
    assert said[-1].startswith("g6.xlarge us-east-1a on-demand $0.80/h (first choice)")


@pytest.mark.e2e
def test_started_on_a_fallback_size_says_so_and_how_the_boxes_go_back(refusing_ec2, ec2):
    ids = _no_room_for(refusing_ec2, ec2, "g6.xlarge")
    said: list[str] = []
    _start(_aws_target(ids, capacityWaitMinutes=0), said, Clock())
    assert said[-1] == (
        "the boxes now run on g5.xlarge, not the stack's first choice g6.xlarge: once they "
        "stop, the next `fab start` tries g6.xlarge first again"
    )


@pytest.mark.e2e
def test_when_nothing_starts_the_boxes_left_on_another_size_are_said(refusing_ec2, ec2):
    ids = _no_room_for(refusing_ec2, ec2, "g6.xlarge", "g5.xlarge")
    with pytest.raises(Exit) as info:
        _start(_aws_target(ids, capacityWaitMinutes=0), [], Clock())
    assert (
        "The boxes are left on g5.xlarge, not the stack's first choice g6.xlarge: once they "
        "stop, the next `fab start` tries g6.xlarge first again."
    ) in str(info.value)


@pytest.mark.e2e
def test_a_restriction_is_skipped_at_once_with_its_reason(refusing_ec2, ec2):
    refused, _, started_on = refusing_ec2
    ids = _stopped_boxes(ec2, 1)
    refused["g6.xlarge"] = "Unsupported"  # no wait sells it in this zone
    clock, said = Clock(), []
    after = _start(_aws_target(ids), said, clock)
    assert {b.state for b in after} <= {RUNNING, STARTING}
    assert clock.slept == []
    assert said[:2] == [
        "try 1: g6.xlarge us-east-1a: Unsupported (restriction)",
        f"  the cloud's words: {NOT_SUPPORTED}",
    ]
    assert started_on == [{"g6.xlarge"}, {"g5.xlarge"}]


@pytest.mark.e2e
def test_each_try_is_one_short_line_and_the_clouds_text_is_said_once(refusing_ec2, ec2):
    ids = _no_room_for(refusing_ec2, ec2, "g6.xlarge", "g5.xlarge")
    said: list[str] = []
    with pytest.raises(Exit):
        _start(_aws_target(ids, capacityWaitMinutes=1), said, Clock())
    tries = [line for line in said if line.startswith("try ")]
    assert len(tries) == 4  # three of g6.xlarge in the minute, then one of g5.xlarge
    assert all(line.endswith("InsufficientInstanceCapacity (capacity)") for line in tries)
    assert [line for line in said if NO_ROOM in line] == [f"  the cloud's words: {NO_ROOM}"]


@pytest.mark.e2e
def test_when_nothing_starts_the_clouds_text_is_said_once_under_the_table(refusing_ec2, ec2):
    ids = _no_room_for(refusing_ec2, ec2, "g6.xlarge", "g5.xlarge")
    with pytest.raises(Exit) as info:
        _start(_aws_target(ids, capacityWaitMinutes=1), [], Clock())
    lines = str(info.value).splitlines()
    assert lines[1:5] == [
        "  g6.xlarge us-east-1a    3 tries  InsufficientInstanceCapacity",
        "  g5.xlarge us-east-1a      1 try  InsufficientInstanceCapacity",
        "the cloud's words:",
        f"  {CAPACITY}: {NO_ROOM}",
    ]
    assert sum(NO_ROOM in line for line in lines) == 1


def _stopped_in(ec2, zone: str, size: str, spot: bool = False) -> list[str]:
    """One stopped box of `size` in `zone`."""
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    found = ec2.run_instances(
        ImageId=image, InstanceType=size, MinCount=1, MaxCount=1,
        Placement={"AvailabilityZone": zone}, **extra,
    )  # fmt: skip
    ids = [i["InstanceId"] for i in found["Instances"]]
    ec2.stop_instances(InstanceIds=ids)
    return ids


@pytest.mark.e2e
def test_a_size_the_zone_does_not_sell_is_skipped_and_said_so_in_the_placement_line(
    refusing_ec2, ec2
):
    # moto's EC2 sells no g6.xlarge in us-east-1e: the box left on g5.xlarge stays on it.
    ids = _stopped_in(ec2, "us-east-1e", "g5.xlarge")
    said: list[str] = []
    _start(_aws_target(ids), said, Clock())
    assert said[0] == "skipping g6.xlarge us-east-1e: not sold in us-east-1e"
    assert said[-2] == (
        "g5.xlarge us-east-1e on-demand $1.01/h (fallback 2 of 2; g6.xlarge: not sold in "
        "us-east-1e)"
    )


@pytest.mark.e2e
def test_when_nothing_starts_a_skipped_size_has_its_row_with_its_reason(refusing_ec2, ec2):
    refusing_ec2[0]["g5.xlarge"] = CAPACITY
    ids = _stopped_in(ec2, "us-east-1e", "g5.xlarge")
    with pytest.raises(Exit) as info:
        _start(_aws_target(ids, capacityWaitMinutes=0), [], Clock())
    lines = str(info.value).splitlines()
    assert lines[1:3] == [
        "  g6.xlarge us-east-1e    skipped  not sold in us-east-1e",
        f"  g5.xlarge us-east-1e      1 try  {CAPACITY}: {NO_ROOM}",
    ]


SPOT_TRIED = [
    {"size": "g6.xlarge", "zone": "us-east-1a", "market": "spot", "refusal": f"{CAPACITY}: x"},
    {"size": "g5.xlarge", "zone": "us-east-1a", "market": "spot", "refusal": ""},
]


@pytest.mark.e2e
def test_a_spot_box_on_a_fallback_size_says_why_the_first_choice_was_not_tried(refusing_ec2, ec2):
    ids = _stopped_in(ec2, "us-east-1a", "g5.xlarge", spot=True)
    said: list[str] = []
    taken = {"size": "g5.xlarge", "zone": "us-east-1a", "market": "spot"}
    _start(_aws_target(ids, spot=True, placement=taken, placementTried=SPOT_TRIED), said, Clock())
    assert said[-1].startswith("g5.xlarge us-east-1a spot $")
    assert said[-1].endswith("(fallback 2 of 2; g6.xlarge: not tried: a spot box keeps its size)")


@pytest.mark.e2e
def test_peers_of_a_box_up_on_a_fallback_size_say_why_the_first_choice_was_not_tried(
    refusing_ec2, ec2
):
    running = _stopped_in(ec2, "us-east-1a", "g5.xlarge")
    ec2.start_instances(InstanceIds=running)
    ids = running + _stopped_in(ec2, "us-east-1a", "g5.xlarge")
    said: list[str] = []
    _start(_aws_target(ids), said, Clock())
    assert said[-1] == (
        "g5.xlarge us-east-1a on-demand $1.01/h (fallback 2 of 2; g6.xlarge: not tried: box 0 "
        "is up on g5.xlarge)"
    )


@pytest.mark.e2e
def test_a_box_that_is_up_is_never_resized_and_its_peers_start_on_its_size(refusing_ec2, ec2):
    refused, calls, _ = refusing_ec2
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ids = [
        i["InstanceId"]
        for i in ec2.run_instances(
            ImageId=image, InstanceType="g6.xlarge", MinCount=2, MaxCount=2,
            Placement={"AvailabilityZone": "us-east-1a"},
        )["Instances"]
    ]  # fmt: skip
    ec2.stop_instances(InstanceIds=ids[1:])
    refused["g6.xlarge"] = CAPACITY
    said: list[str] = []
    with pytest.raises(Exit, match="the boxes did not start"):
        _start(_aws_target(ids, capacityWaitMinutes=0), said, Clock())
    assert "ModifyInstanceAttribute" not in calls
    described = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    assert {i["InstanceType"] for r in described for i in r["Instances"]} == {"g6.xlarge"}
    assert said[0].startswith("box 0 is up on g6.xlarge: the stopped boxes start on that size")


@pytest.fixture
def lagging_resize(refusing_ec2, ec2, monkeypatch):
    """EC2 accepts ModifyInstanceAttribute but reads the new size back only at the second
    DescribeInstanceAttribute after it: eventual consistency, as EC2 documents it."""
    pending: list[dict] = []
    reads: list[str] = []
    real_client = power_aws._client

    def client(target, service):
        made = real_client(target, service)
        made.meta.events.register("before-call.ec2.ModifyInstanceAttribute", accept)
        made.meta.events.register("before-call.ec2.DescribeInstanceAttribute", read)
        return made

    def accept(params, **_):
        pending.append(params["body"])
        return AWSResponse("https://ec2.amazonaws.com/", 200, {}, None), {}

    def read(params, **_):
        reads.append(params["body"]["InstanceId"])
        if len(reads) == 2:
            for body in pending:
                ec2.modify_instance_attribute(
                    InstanceId=body["InstanceId"],
                    InstanceType={"Value": body["InstanceType.Value"]},
                )
            pending.clear()

    monkeypatch.setattr(power_aws, "_client", client)
    monkeypatch.setattr(power_aws, "READ_BACK_FIRST_SECONDS", 0.05, raising=False)
    return reads


@pytest.mark.e2e
def test_the_start_goes_out_once_ec2_reads_the_new_size_back(refusing_ec2, lagging_resize, ec2):
    _, calls, started_on = refusing_ec2
    ids = _no_room_for(refusing_ec2, ec2, "g6.xlarge")
    _start(_aws_target(ids, capacityWaitMinutes=0), [], Clock())
    assert started_on == [{"g6.xlarge"}, {"g5.xlarge"}]
    assert len(lagging_resize) >= 2
    assert calls.index("DescribeInstanceAttribute") < len(calls) - calls[::-1].index(
        "StartInstances"
    )


# --- Azure -----------------------------------------------------------------------------


@pytest.fixture
def arm(azure):
    """The fake ARM of `azure` with box 1 deallocated, an A100 and an H100 size sold."""
    azure.state.skus["eastus"] = [
        sku("Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24),
        sku("Standard_NC40ads_H100_v5", "standardNCadsH100v5Family", 40, zones=("1", "2")),
    ]
    azure.state.vms = {VM.format(0): "PowerState/deallocated"}
    return azure


AZURE_TRIED = [
    {"size": "Standard_NC24ads_A100_v4", "zone": "", "market": "on-demand", "refusal": ""},
    {"size": "Standard_NC40ads_H100_v5", "zone": "", "market": "on-demand", "refusal": "x"},
]


def _azure_target(boxes: int = 1, **more):
    vms = [VM.format(n) for n in range(boxes)]
    return from_outputs(
        target_outputs("azure", vms, placementTried=AZURE_TRIED, **more), "stack test"
    )


def test_azure_reads_the_starts_operation_and_sees_allocation_failed(arm):
    arm.state.start_refusals[VM.format(0)] = ["AllocationFailed", "AllocationFailed"]
    clock, said = Clock(), []
    _start(_azure_target(), said, clock)
    tries = [line for line in said if line.startswith("try ")]
    assert tries == [
        "try 1: Standard_NC24ads_A100_v4 1: AllocationFailed (capacity)",
        "try 2: Standard_NC24ads_A100_v4 1: AllocationFailed (capacity)",
        "try 3: Standard_NC24ads_A100_v4 1: started",
    ]
    reads = [path for path, _ in arm.state.requests if "/operations/" in path]
    assert len(reads) == 3  # each start read to its end


def test_azure_resizes_the_deallocated_vm_with_a_patch_and_starts_it(arm):
    # No A100 for the 5 minutes of capacityWaitMinutes (11 tries, 30 s apart); the H100
    # has room.
    arm.state.start_refusals[VM.format(0)] = ["AllocationFailed"] * 11
    clock, said = Clock(), []
    _start(_azure_target(), said, clock)
    assert clock.slept == [capacity.RETRY_SECONDS] * 10
    assert arm.state.vm_sizes[VM.format(0)] == "Standard_NC40ads_H100_v5"
    assert arm.state.vms[VM.format(0)] == "PowerState/running"
    patches = [path for path, _ in arm.state.requests if path == VM.format(0)]
    assert patches  # GET and PATCH of the VM itself
    assert said[-2].startswith("Standard_NC40ads_H100_v5 1 on-demand $6.98/h (fallback 2 of 2; ")


def test_azure_an_unexpected_refusal_of_the_operation_stops_at_once(arm):
    arm.state.start_refusals[VM.format(0)] = ["VMAgentStatusCommunicationError"]
    with pytest.raises(Exit, match="VMAgentStatusCommunicationError"):
        _start(_azure_target(), [], Clock())


def test_azure_size_not_sold_in_the_vms_zone_is_skipped(arm):
    arm.state.vm_zones[VM.format(0)] = "3"  # the H100 is sold in zones 1 and 2 only
    arm.state.start_refusals[VM.format(0)] = ["AllocationFailed"] * 3
    with pytest.raises(Exit, match="the boxes did not start"):
        _start(_azure_target(capacityWaitMinutes=0), [], Clock())
    assert VM.format(0) not in arm.state.vm_sizes


@pytest.mark.parametrize("header", ["Azure-AsyncOperation", "Location"])
def test_azure_the_start_waits_for_the_resizes_operation_to_end(arm, header):
    # ARM answers the PATCH 200 with the VM "Updating" and an operation that runs a while;
    # a start before its end is refused (409 Conflict).
    arm.state.operation_seconds, arm.state.operation_header = 0.6, header
    arm.state.start_refusals[VM.format(0)] = ["AllocationFailed"]
    said: list[str] = []
    _start(_azure_target(capacityWaitMinutes=0), said, Clock())
    assert arm.state.vm_sizes[VM.format(0)] == "Standard_NC40ads_H100_v5"
    assert arm.state.vms[VM.format(0)] == "PowerState/running"
    assert said[-3] == "try 2: Standard_NC40ads_H100_v5 1: started"


def test_azure_a_running_vm_is_never_resized(arm):
    arm.state.vms = {VM.format(0): "PowerState/running", VM.format(1): "PowerState/deallocated"}
    arm.state.start_refusals[VM.format(1)] = ["AllocationFailed"] * 3
    with pytest.raises(Exit, match="the boxes did not start"):
        _start(_azure_target(2, capacityWaitMinutes=0), [], Clock())
    assert arm.state.reboots == []  # Azure reboots a running VM onto its new size
    assert arm.state.vm_sizes == {}


def test_azure_a_size_the_subscription_may_not_use_is_skipped_at_once_with_its_reason(arm):
    arm.state.skus["eastus"][0] = sku(
        "Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24, restricted=True
    )
    clock, said = Clock(), []
    _start(_azure_target(), said, clock)
    assert clock.slept == []
    assert said[0] == "try 1: Standard_NC24ads_A100_v4 1: SkuNotAvailable (restriction)"
    assert said[1].startswith("  the cloud's words: ") and "NotAvailableForSubscription" in said[1]
    assert arm.state.vm_sizes[VM.format(0)] == "Standard_NC40ads_H100_v5"


def test_azure_a_size_the_subscription_may_not_use_is_never_resized_to(arm):
    arm.state.vm_sizes[VM.format(0)] = "Standard_NC40ads_H100_v5"  # left there
    arm.state.skus["eastus"][0] = sku(
        "Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24, restricted=True
    )
    said: list[str] = []
    _start(_azure_target(), said, Clock())
    assert said[0] == (
        "skipping Standard_NC24ads_A100_v4 1: SkuNotAvailable: NotAvailableForSubscription "
        "in eastus"
    )
    assert [path for path, _ in arm.state.requests].count(VM.format(0)) == 1  # GET, no PATCH


def _stopping(arm, seconds: float) -> None:
    """VM 0 deallocating, as after the idle watchdog's stop, for `seconds`."""
    arm.state.vms[VM.format(0)] = "PowerState/running"
    arm.state.operation_seconds = seconds
    arm.act(f"{VM.format(0)}/deallocate")
    arm.state.operation_seconds = 0


def test_azure_a_box_still_stopping_is_waited_for_then_started(arm):
    _stopping(arm, 0.5)
    clock, said = Clock(), []

    def sleep(seconds):
        time.sleep(0.1)
        clock.sleep(seconds)

    after = capacity.start(
        power.cloud_api(_azure_target()), _azure_target(), said.append,
        sleep=sleep, clock=lambda: clock.now,
    )  # fmt: skip
    assert [box.state for box in after] == [RUNNING]
    assert said[0] == f"box 0 ({VM.format(0)}): stopping: waiting for it to stop, then starting it"
    assert set(clock.slept) == {capacity.STOPPING_POLL_SECONDS}


def test_azure_a_box_that_does_not_stop_is_waited_for_no_longer_than_the_bound(arm):
    arm.state.vms[VM.format(0)] = "PowerState/deallocating"  # and stays so
    clock = Clock()
    with pytest.raises(Exit, match="still, after 10 minutes: run `fab start` again once"):
        _start(_azure_target(), [], clock)
    assert sum(clock.slept) == capacity.STOPPING_WAIT_SECONDS


def test_candidate_sizes_come_from_placement_tried_in_order_of_the_boxes_market():
    target = _aws_target(
        ["i-0123456789abcdef0"],
        placement={"size": "g6.xlarge", "zone": "us-east-1a", "market": "on-demand"},
    )
    assert capacity.candidate_sizes(target, "g6.xlarge") == ["g6.xlarge", "g5.xlarge"]
    bare = from_outputs(target_outputs("aws", ["i-0123456789abcdef0"]), "stack test")
    assert capacity.candidate_sizes(bare, "g5.xlarge") == ["g5.xlarge"]
