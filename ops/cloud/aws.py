"""AWS: the boxes' power from EC2 (DescribeInstances, StartInstances), your credentials.

EC2 says what stopped an instance: its state reason code, and the transition's time.
"""

from __future__ import annotations

from typing import Any

from invoke.exceptions import Exit

from ops.cloud.api import GONE, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.resolve import Target

STATES = {
    "pending": STARTING,
    "running": RUNNING,
    "stopping": STOPPING,
    "shutting-down": STOPPING,
    "stopped": STOPPED,
    "terminated": GONE,
}
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StateReason.html
REASONS = {
    "Client.InstanceInitiatedShutdown": "the box stopped itself (its idle watchdog, a failed "
    "first boot, or a shutdown on the box)",
    "Client.UserInitiatedShutdown": "stopped from outside the box: the daily stop, a budget "
    "stop, the idle alarm, or a stop by hand",
    "Server.SpotInstanceShutdown": "a spot interruption: AWS starts it again when capacity returns",
    "Server.SpotInstanceTermination": "a spot interruption",
    "Server.ScheduledStop": "AWS's scheduled maintenance",
    "Server.InsufficientInstanceCapacity": "AWS had no capacity for it",
}


def _ec2(target: Target):
    import boto3

    return boto3.session.Session(region_name=target.region or None).client("ec2")


def _errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError


def states(target: Target) -> list[BoxPower]:
    try:
        found = _instances(_ec2(target), list(target.box_ids))
    except _errors() as error:
        raise Exit(_refused("describe the boxes", target, error)) from None
    return [_power(node, box_id, found.get(box_id)) for node, box_id in enumerate(target.box_ids)]


def start(target: Target) -> list[BoxPower]:
    stopped = [box.box_id for box in states(target) if box.state == STOPPED]
    if stopped:
        try:
            _ec2(target).start_instances(InstanceIds=stopped)
        except _errors() as error:
            raise Exit(_refused("start the boxes", target, error)) from None
    return states(target)


def _instances(ec2, ids: list[str]) -> dict[str, dict[str, Any]]:
    # A filter, not InstanceIds: an id that is gone is simply not listed.
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-id", "Values": ids}]
    )
    return {
        instance["InstanceId"]: instance
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    }


def _power(node: int, box_id: str, instance: dict[str, Any] | None) -> BoxPower:
    if instance is None:
        return BoxPower(node, box_id, GONE, "EC2 does not know it: terminated and forgotten")
    state = STATES.get(instance["State"]["Name"], instance["State"]["Name"])
    if state not in (STOPPED, STOPPING, GONE):
        return BoxPower(node, box_id, state)
    code = (instance.get("StateReason") or {}).get("Code", "")
    why = REASONS.get(code) or (instance.get("StateReason") or {}).get("Message", "")
    when = instance.get("StateTransitionReason", "")
    when = when[when.find("(") + 1 : when.rfind(")")] if "(" in when else ""
    return BoxPower(node, box_id, state, f"{why}, {when}" if why and when else why or when)


def _refused(doing: str, target: Target, error: Exception) -> str:
    return (
        f"AWS would not {doing} of {target.source} ({error}); check your credentials "
        f"(`aws sts get-caller-identity`, AWS_PROFILE) and region {target.region or '(unset)'}"
    )
