"""AWS leftovers of a stack, found by its `cost-scope` tag in its region: instances in
any state but terminated, live spot requests, EBS volumes and snapshots, Elastic IPs
and network interfaces, each with what it bills.

The launch template tags the boxes and their volumes (pulumi/infra/aws/training_box.py),
the rest of the stack is tagged where it is declared. A spot request is the stack's when
it carries the tag or launched one of the stack's instances (terminated ones included,
which EC2 lists for about an hour): a persistent request of a terminated box launches a
new one (stack/spot_requests.py). A network interface is the stack's when tagged or in
a VPC of the stack; one attached to a listed instance goes with it and is not listed apart.

boto3 is imported here only, so an Azure user needs none. Every request has botocore's
connect and read timeouts and a bounded number of attempts: the client made here is
the one the searches of stack/ec2_boxes.py and stack/spot_requests.py ask through.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ops.leaks.found import Cost, Leak, LeakCheckError, box_cost
from ops.leaks.scope import StackScope
from stack import ec2_boxes, spot_requests

CALL_TIMEOUT_SECONDS = 15
CALL_ATTEMPTS = 3
# Instance states EC2 bills compute for, or is about to: pending, running.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html
BILLED_STATES = ("pending", "running")
# us-east-1 list prices read from AWS's price-list files on 2026-10-16 (public IPv4
# $0.005 per address-hour, attached or not, since 2024-02-01; gp3 $0.08 per GB-month):
# https://github.com/ChiefGyk3D/Clouds-Against-Humanity/wiki/Provider-AWS-Cost-Lesson
PUBLIC_IPV4_USD_PER_HOUR = 0.005
GP3_USD_PER_GB_MONTH = 0.08
LIST_PRICE = "us-east-1 list price of 2026-10-16"


def find(scope: StackScope) -> list[Leak]:
    """Everything of the stack EC2 still holds, instances first; LeakCheckError when
    EC2 cannot be asked (credentials, a refusal, no answer)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return _find(_ec2(scope), scope)
    except ClientError as error:
        detail = error.response.get("Error", {})
        raise LeakCheckError(
            f"EC2 refused {error.operation_name} in {scope.region}: "
            f"{detail.get('Code', '?')} {detail.get('Message', '')}".rstrip()
        ) from None
    except BotoCoreError as error:
        raise LeakCheckError(f"EC2 in {scope.region} could not be asked ({error})") from None


def _ec2(scope: StackScope) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=CALL_TIMEOUT_SECONDS,
        read_timeout=CALL_TIMEOUT_SECONDS,
        retries={"total_max_attempts": CALL_ATTEMPTS, "mode": "standard"},
    )
    session = boto3.session.Session(
        profile_name=scope.aws_profile or None, region_name=scope.region
    )
    return session.client("ec2", config=config)


def _find(ec2: Any, scope: StackScope) -> list[Leak]:
    key, value = scope.tag
    tagged = [{"Name": f"tag:{key}", "Values": [value]}]
    every = ec2_boxes.describe(ec2, tag=scope.tag)
    found = spot_requests.find_requests(ec2, instance_ids=list(every), tag=scope.tag)
    requests = [found[rid] for rid in spot_requests.live(found)]
    # A box a live request of the stack launched is the stack's, tagged or not.
    launched = {r["InstanceId"] for r in requests if r.get("InstanceId")} - set(every)
    every.update(ec2_boxes.describe(ec2, launched))
    instances = [i for i in every.values() if i["State"]["Name"] != "terminated"]
    return [
        *map(_instance, instances),
        *map(_spot_request, requests),
        *map(_volume, _matching(ec2, "describe_volumes", "Volumes", scope)),
        *map(_snapshot, _pages(ec2, "describe_snapshots", "Snapshots", tagged, OwnerIds=["self"])),
        *map(_address, ec2.describe_addresses(Filters=tagged)["Addresses"]),
        *map(_interface, _interfaces(ec2, scope, {i["InstanceId"] for i in instances})),
    ]


def _matching(
    ec2: Any, operation: str, key: str, scope: StackScope, searches: Iterable = ()
) -> list[dict]:
    """Every item of a Describe `operation` that carries the stack's tag or matches one of
    `searches` (filter, values); an item both match is listed once for each."""
    pages = spot_requests.pages_matching(ec2, operation, searches, scope.tag)
    return [item for page in pages for item in page[key]]


def _pages(ec2: Any, operation: str, key: str, filters: list, **more: Any) -> list[dict]:
    # For what `pages_matching` cannot ask: a snapshot listing's OwnerIds (without it,
    # every public snapshot in the region is searched too).
    pages = ec2.get_paginator(operation).paginate(Filters=filters, **more)
    return [item for page in pages for item in page[key]]


def _interfaces(ec2: Any, scope: StackScope, listed_instances: set[str]) -> list[dict]:
    vpcs = [v["VpcId"] for v in _matching(ec2, "describe_vpcs", "Vpcs", scope)]
    in_vpcs = [("vpc-id", vpcs)]
    interfaces = _matching(ec2, "describe_network_interfaces", "NetworkInterfaces", scope, in_vpcs)
    # One both tagged and in a VPC of the stack is listed by both searches: once here.
    found = {n["NetworkInterfaceId"]: n for n in interfaces}
    return [
        n
        for n in found.values()
        if (n.get("Attachment") or {}).get("InstanceId") not in listed_instances
    ]


def _name(item: dict) -> str:
    return next((t["Value"] for t in item.get("Tags") or [] if t.get("Key") == "Name"), "")


def _instance(instance: dict) -> Leak:
    state, size = instance["State"]["Name"], instance.get("InstanceType", "?")
    spot = instance.get("InstanceLifecycle") == "spot"
    if state in BILLED_STATES:
        cost = box_cost("aws", size, spot)
    else:
        cost = Cost(0.0, basis=f"{state}: no compute billed; its volumes are listed")
    market = "spot" if spot else "on demand"
    return Leak(
        "instance", instance["InstanceId"], f"{state} {size} {market} {_name(instance)}", cost
    )


def _spot_request(request: dict) -> Leak:
    size = (request.get("LaunchSpecification") or {}).get("InstanceType", "?")
    instance = request.get("InstanceId")
    state = request["State"]
    if state == "active" and instance:
        cost = Cost(0.0, basis=f"its instance {instance} is listed above, or terminated")
    else:
        then = box_cost("aws", size, spot=True)
        cost = Cost(0.0, basis=f"nothing until it launches a {size}: then {then.said()}")
    kind = request.get("Type", "?")
    return Leak("spot request", request["SpotInstanceRequestId"], f"{state} {kind} {size}", cost)


def _volume(volume: dict) -> Leak:
    size, kind = volume.get("Size", 0), volume.get("VolumeType", "?")
    if kind == "gp3":
        cost = Cost(
            usd_per_month=size * GP3_USD_PER_GB_MONTH,
            basis=f"{size} GiB gp3 at ${GP3_USD_PER_GB_MONTH}/GB-month, {LIST_PRICE}",
        )
    else:
        cost = Cost(basis=f"{kind} volumes are not priced here (only gp3, the boxes' own)")
    state = volume.get("State", "?")
    return Leak("volume", volume["VolumeId"], f"{state} {size} GiB {kind} {_name(volume)}", cost)


def _snapshot(snapshot: dict) -> Leak:
    size = snapshot.get("VolumeSize", "?")
    cost = Cost(basis="snapshot storage is not priced here (billed per GB-month stored)")
    detail = f"{size} GiB of {snapshot.get('VolumeId', '?')} {_name(snapshot)}"
    return Leak("snapshot", snapshot["SnapshotId"], detail, cost)


def _address(address: dict) -> Leak:
    cost = Cost(PUBLIC_IPV4_USD_PER_HOUR, basis=f"public IPv4 address, {LIST_PRICE}")
    held = address.get("InstanceId") or address.get("NetworkInterfaceId") or "unattached"
    ident = address.get("AllocationId") or address.get("PublicIp", "?")
    return Leak("Elastic IP", ident, f"{address.get('PublicIp', '?')} {held}", cost)


def _interface(interface: dict) -> Leak:
    association = interface.get("Association") or {}
    if association.get("PublicIp") and not association.get("AllocationId"):
        cost = Cost(PUBLIC_IPV4_USD_PER_HOUR, basis=f"its public IPv4 address, {LIST_PRICE}")
    else:
        cost = Cost(0.0, basis="no charge of its own; it keeps its subnet and VPC from deletion")
    detail = f"{interface.get('Status', '?')} {interface.get('SubnetId', '?')} {_name(interface)}"
    return Leak("network interface", interface["NetworkInterfaceId"], detail, cost)
