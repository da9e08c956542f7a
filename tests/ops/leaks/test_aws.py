"""`fab leaks` on AWS, against moto_server's EC2: after `pulumi destroy`, every thing
left under the stack's `cost-scope` tag is listed with what it bills, exit 1; a clean
account exits 0; a cloud that cannot be asked proves nothing (exit 2)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ops.leaks import aws
from ops.leaks.found import LeakCheckError, within
from ops.leaks.scope import StackScope
from tests.ops.leaks.conftest import COST_SCOPE, STACK, assert_listed, write_stack
from tests.ops.leaks.conftest import report_line as _line

pytestmark = pytest.mark.e2e  # moto_server and `fab` as a subprocess

TAG = [{"Key": "cost-scope", "Value": COST_SCOPE}]


def _tags(kind: str, *more: dict) -> list[dict]:
    return [{"ResourceType": kind, "Tags": [*TAG, *more]}]


@pytest.fixture
def ec2(empty_aws_account):
    import boto3

    return boto3.client("ec2", region_name="us-east-1")


def _image(ec2) -> str:
    return ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]


def _stopped_instance(ec2, name: str = "glucose-training-box-0") -> str:
    instance = ec2.run_instances(
        ImageId=_image(ec2), InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=_tags("instance", {"Key": "Name", "Value": name}),
    )["Instances"][0]["InstanceId"]  # fmt: skip
    ec2.stop_instances(InstanceIds=[instance])
    return instance


def _one_of_each(ec2) -> dict[str, str]:
    """One leftover of each kind, as a destroy that went wrong leaves them."""
    request = ec2.request_spot_instances(
        InstanceCount=1, Type="persistent",
        LaunchSpecification={"ImageId": _image(ec2), "InstanceType": "p3.2xlarge"},
        TagSpecifications=_tags("spot-instances-request"),
    )["SpotInstanceRequests"][0]["SpotInstanceRequestId"]  # fmt: skip
    volume = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=100, VolumeType="gp3",
        TagSpecifications=_tags("volume"),
    )["VolumeId"]  # fmt: skip
    snapshot = ec2.create_snapshot(VolumeId=volume, TagSpecifications=_tags("snapshot"))
    address = ec2.allocate_address(Domain="vpc", TagSpecifications=_tags("elastic-ip"))
    # An untagged interface, in the stack's (tagged) VPC: found by where it is.
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16", TagSpecifications=_tags("vpc"))["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    interface = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]
    (live,) = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request])[
        "SpotInstanceRequests"
    ]
    return {
        "instance": _stopped_instance(ec2),
        "launched": live["InstanceId"],  # untagged: the stack's through its request
        "spot request": request,
        "volume": volume,
        "snapshot": snapshot["SnapshotId"],
        "Elastic IP": address["AllocationId"],
        "network interface": interface["NetworkInterfaceId"],
    }


def test_one_leftover_of_each_kind_is_listed_with_its_cost_and_exits_1(ec2, tmp_path, fab_leaks):
    left = _one_of_each(ec2)
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert_listed(done, {k: v for k, v in left.items() if k != "launched"})
    assert _line(done.stdout, left["launched"]).lstrip().startswith("instance")
    assert "$0.000/h (stopped: no compute billed" in _line(done.stdout, left["instance"])
    assert "running p3.2xlarge spot  $0.920/h (p3.2xlarge spot, catalog" in _line(
        done.stdout, left["launched"]
    )
    assert "is listed above" in _line(done.stdout, left["spot request"])
    assert "$8.00/month (100 GiB gp3 at $0.08/GB-month" in _line(done.stdout, left["volume"])
    assert "cost unknown: snapshot storage" in _line(done.stdout, left["snapshot"])
    assert "$0.005/h (public IPv4 address" in _line(done.stdout, left["Elastic IP"])
    assert "7 things left" in done.stdout and "cost unknown for 1 (snapshot)" in done.stdout
    assert "run `fab leaks` again" in done.stderr


def test_a_running_spot_box_is_billed_at_the_catalogs_spot_price(ec2, tmp_path, fab_leaks):
    instance = ec2.run_instances(
        ImageId=_image(ec2), InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"}, TagSpecifications=_tags("instance"),
    )["Instances"][0]["InstanceId"]  # fmt: skip
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 1, done.stderr
    line = _line(done.stdout, instance)
    assert "running g5.xlarge spot" in line and "$0.400/h (g5.xlarge spot, catalog" in line


def test_only_the_stacks_own_things_are_listed(ec2, tmp_path, fab_leaks):
    other = ec2.run_instances(
        ImageId=_image(ec2), InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": "cost-scope", "Value": "glucose-training/prod"}]}],
    )["Instances"][0]["InstanceId"]  # fmt: skip
    untagged = ec2.create_volume(AvailabilityZone="us-east-1a", Size=8)["VolumeId"]
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 0, done.stdout + done.stderr
    assert other not in done.stdout and untagged not in done.stdout


def test_a_clean_account_exits_0_saying_nothing_bills(ec2, tmp_path, fab_leaks):
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"stack {STACK} (aws us-east-1, tag cost-scope={COST_SCOPE}): nothing left that bills."
    )


def test_a_live_spot_request_of_a_terminated_box_is_found_by_the_box_it_launched(ec2, tmp_path):
    # The request carries no tag of ours (as the stack's older launches left them); the
    # box it launched does, and EC2 still lists it terminated.
    request = ec2.request_spot_instances(
        InstanceCount=1, Type="persistent",
        LaunchSpecification={"ImageId": _image(ec2), "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"][0]["SpotInstanceRequestId"]  # fmt: skip
    (found,) = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request])[
        "SpotInstanceRequests"
    ]
    ec2.create_tags(Resources=[found["InstanceId"]], Tags=TAG)
    ec2.terminate_instances(InstanceIds=[found["InstanceId"]])
    leaks = aws.find(StackScope(STACK, "aws", "us-east-1"))
    assert [(leak.kind, leak.ident) for leak in leaks] == [("spot request", request)]


def test_a_name_from_the_cloud_reaches_the_terminal_escaped(ec2, tmp_path, fab_leaks):
    # EC2's XML carries no C0 control character; a bidi override and the C1 CSI it does.
    instance = _stopped_instance(ec2, "box\u202eevil\x9b2J[bold]x")
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 1
    assert "box\\u202eevil\\x9b2J[bold]x" in _line(done.stdout, instance)
    assert not any(ch in done.stdout for ch in "\u202e\x9b")


def test_an_ec2_that_cannot_be_reached_proves_nothing_exit_2(tmp_path, fab_leaks, monkeypatch):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    write_stack(tmp_path, "aws", "us-east-1")
    done = fab_leaks("--stack", STACK)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("fab leaks: EC2 in us-east-1 could not be asked")
    assert line.endswith("nothing is proven, run it again")


def test_an_ec2_that_never_answers_is_given_up_on_at_the_bound(monkeypatch):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts, never answers: each read waits its full timeout, then retries
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    began = time.monotonic()
    try:
        with pytest.raises(LeakCheckError, match="aws did not answer within 2 s"):
            within(2, lambda: aws.find(StackScope(STACK, "aws", "us-east-1")), "aws")
    finally:
        silent.close()
    assert time.monotonic() - began < 5
    stuck = [t for t in threading.enumerate() if t.name == "leaks-aws"]
    assert stuck and all(t.daemon for t in stuck)  # it cannot hold `fab` open at exit
