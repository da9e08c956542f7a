"""A launch's boxes found by record, request and tag, and let go, on moto's EC2 with its
persistent spot requests: a request outlives its terminated instance there as on AWS."""

from __future__ import annotations

import pytest

from stack import ec2_boxes
from stack.ec2_boxes import LAUNCH_TAG, holdings, release, until_found
from stack.spot_requests import find_requests, live

pytestmark = pytest.mark.e2e  # moto

LAUNCH_ID = "feedfacecafe0001"


@pytest.fixture
def ec2(empty_aws_account):
    return empty_aws_account.client("ec2")


def _persistent_spot_box(ec2, launch_id: str = LAUNCH_ID) -> dict:
    """A persistent spot request that stops, tagged with its launch, once its box runs."""
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (request,) = ec2.request_spot_instances(
        Type="persistent",
        InstanceInterruptionBehavior="stop",
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
        TagSpecifications=[
            {
                "ResourceType": "spot-instances-request",
                "Tags": [{"Key": LAUNCH_TAG, "Value": launch_id}],
            }
        ],
    )["SpotInstanceRequests"]
    (request,) = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]]
    )["SpotInstanceRequests"]
    return request


def _states(ec2) -> dict[str, str]:
    return {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }


def _live_requests(ec2) -> list[str]:
    return live(
        {
            r["SpotInstanceRequestId"]: r
            for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
        }
    )


def test_release_cancels_the_persistent_request_then_terminates(ec2):
    request = _persistent_spot_box(ec2)
    released = release(ec2, [request["InstanceId"]], [request["SpotInstanceRequestId"]], "")
    assert released.cancelled == [request["SpotInstanceRequestId"]]
    assert released.terminated == [request["InstanceId"]]
    assert _live_requests(ec2) == []
    assert set(_states(ec2).values()) == {"terminated"}


def test_a_request_whose_box_was_terminated_by_hand_is_cancelled_by_its_recorded_id(ec2):
    request = _persistent_spot_box(ec2, launch_id="")
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    assert _live_requests(ec2) == [request["SpotInstanceRequestId"]]  # EC2 would relaunch
    released = release(ec2, [request["InstanceId"]], [request["SpotInstanceRequestId"]], "")
    assert (released.cancelled, released.terminated) == ([request["SpotInstanceRequestId"]], [])
    assert _live_requests(ec2) == []


def test_a_request_nothing_recorded_is_found_by_the_launchs_tag(ec2):
    request = _persistent_spot_box(ec2)
    release(ec2, [], [], LAUNCH_ID)
    assert _live_requests(ec2) == []
    assert _states(ec2) == {request["InstanceId"]: "terminated"}


def test_another_launchs_request_and_box_are_left_alone(ec2):
    # A replacement's new set carries the stack's tags too: the old set's delete must
    # not touch it.
    mine, theirs = _persistent_spot_box(ec2), _persistent_spot_box(ec2, "0ther1aunch00000")
    release(ec2, [mine["InstanceId"]], [mine["SpotInstanceRequestId"]], LAUNCH_ID)
    assert _live_requests(ec2) == [theirs["SpotInstanceRequestId"]]
    assert _states(ec2)[theirs["InstanceId"]] == "running"


def test_letting_go_twice_or_of_what_is_gone_does_nothing(ec2):
    request = _persistent_spot_box(ec2)
    record = ([request["InstanceId"]], [request["SpotInstanceRequestId"]], LAUNCH_ID)
    release(ec2, *record)
    again = release(ec2, *record)
    assert (again.cancelled, again.terminated) == ([], [])
    assert str(again) == "nothing was left"


def test_a_box_its_request_launched_again_takes_its_rank(ec2):
    first, again = _persistent_spot_box(ec2), _persistent_spot_box(ec2)
    ec2.terminate_instances(InstanceIds=[first["InstanceId"]])
    # As EC2 records it once the persistent request launched a new box: the request now
    # names it (moto does not relaunch; the second request's box stands in for it).
    held = holdings(ec2, [first["InstanceId"]], [again["SpotInstanceRequestId"]], "")
    (box,) = held.by_rank([first["InstanceId"]], [again["SpotInstanceRequestId"]])
    assert box["InstanceId"] == again["InstanceId"]


def test_eventual_consistency_is_waited_out_within_a_bound(monkeypatch):
    monkeypatch.setattr(ec2_boxes, "NOT_FOUND_FIRST_WAIT_SECONDS", 0.0)
    calls: list[int] = []

    def never_known():
        calls.append(1)
        raise ec2_boxes.NotListed("EC2 does not list i-0abc yet")

    with pytest.raises(ec2_boxes.NotListed):
        until_found(never_known)
    assert len(calls) == ec2_boxes.NOT_FOUND_TRIES


def test_any_other_error_is_not_retried(monkeypatch):
    calls: list[int] = []

    def refused():
        calls.append(1)
        raise PermissionError("UnauthorizedOperation")

    with pytest.raises(PermissionError):
        until_found(refused)
    assert calls == [1]


def test_the_backoff_spans_minutes_not_seconds():
    waits, wait = [], ec2_boxes.NOT_FOUND_FIRST_WAIT_SECONDS
    for _ in range(ec2_boxes.NOT_FOUND_TRIES - 1):
        waits.append(wait)
        wait = min(wait * 2, ec2_boxes.NOT_FOUND_LONGEST_WAIT_SECONDS)
    assert 60 <= sum(waits) <= 300  # AWS: "a couple of seconds ... up to a few minutes"


def test_requests_are_found_by_id_instance_and_tag_in_any_state(ec2):
    request = _persistent_spot_box(ec2)
    rid = request["SpotInstanceRequestId"]
    assert set(find_requests(ec2, request_ids=[rid])) == {rid}
    assert set(find_requests(ec2, instance_ids=[request["InstanceId"]])) == {rid}
    assert set(find_requests(ec2, tag=(LAUNCH_TAG, LAUNCH_ID))) == {rid}
    assert find_requests(ec2, request_ids=["", "sir-00000000"]) == {}
