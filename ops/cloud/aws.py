"""AWS: the boxes' power from EC2 (DescribeInstances, StartInstances), their size in
place (ModifyInstanceAttribute, read back before any start: `fab start` when EC2 has no
room for theirs), and the run's deadline on EventBridge Scheduler, with your credentials.

EC2 says what stopped an instance: its state reason code, and the transition's time.
A deadline past the daily stop is two changes to the stack's schedules: the daily stop
starts only at the deadline (its StartDate; `pulumi up` leaves it), and a one-time
schedule `<daily>-deadline` stops the same boxes then, with the daily stop's own role,
and deletes itself after. Both are AWS's: a dead watchdog or a closed laptop changes
nothing. Recovery is EC2's own: a persistent spot request starts an interrupted box
again when capacity returns (until its ValidUntil).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from invoke.exceptions import Exit

from ops.cloud.power import GONE, GONE_FIX, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.schema import Target
from stack.placement import not_sold_in
from stack.spot_requests import LIVE_STATES

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


# A resize read back (_read_back): first wait, longest wait, and at most this long.
READ_BACK_FIRST_SECONDS = 1.0
READ_BACK_LONGEST_SECONDS = 15.0
READ_BACK_SECONDS = 120

# A schedule's name is at most 64 characters.
DEADLINE_SUFFIX = "-deadline"
AT_FORMAT = "%Y-%m-%dT%H:%M:%S"


def _client(target: Target, service: str):
    import boto3

    return boto3.session.Session(region_name=target.region or None).client(service)


def _ec2(target: Target):
    return _client(target, "ec2")


def _errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError


def states(target: Target) -> list[BoxPower]:
    try:
        found = _instances(_ec2(target), list(target.box_ids))
    except _errors() as error:
        raise Exit(_refused("describe the boxes", target, error)) from None
    return [_power(node, box_id, found.get(box_id)) for node, box_id in enumerate(target.box_ids)]


def try_start(target: Target) -> tuple[str, str] | None:
    """Start every stopped box in one request; EC2's (code, message) when it refuses
    (no capacity, no quota...), None when it accepted."""
    from botocore.exceptions import ClientError

    stopped = [box.box_id for box in states(target) if box.state == STOPPED]
    if not stopped:
        return None
    try:
        _ec2(target).start_instances(InstanceIds=stopped)
    except ClientError as error:
        detail = error.response.get("Error", {})
        return str(detail.get("Code", "")), str(detail.get("Message", ""))
    except _errors() as error:
        raise Exit(_refused("start the boxes", target, error)) from None
    return None


def where(target: Target, node: int = 0) -> tuple[str, str]:
    """(size, zone) box `node` has now."""
    box_id = target.box_ids[node]
    try:
        found = _instances(_ec2(target), [box_id]).get(box_id)
    except _errors() as error:
        raise Exit(_refused("describe the boxes", target, error)) from None
    if found is None:
        raise Exit(f"{box_id} is gone: {GONE_FIX}")
    return found["InstanceType"], found["Placement"]["AvailabilityZone"]


def not_sold(target: Target, zone: str, sizes: list[str]) -> dict[str, str]:
    """Each of `sizes` EC2 does not sell in `zone` (the boxes' disks stay in their zone),
    and why."""
    try:
        pages = (
            _ec2(target)
            .get_paginator("describe_instance_type_offerings")
            .paginate(
                LocationType="availability-zone",
                Filters=[
                    {"Name": "location", "Values": [zone]},
                    {"Name": "instance-type", "Values": list(sizes)},
                ],
            )
        )
        sold = {o["InstanceType"] for page in pages for o in page["InstanceTypeOfferings"]}
    except _errors() as error:
        raise Exit(_refused("list the sizes sold in the boxes' zone", target, error)) from None
    return {size: not_sold_in(zone) for size in sizes if size not in sold}


def resize(target: Target, size: str, box_ids: list[str]) -> tuple[str, str] | None:
    """The instances `box_ids` (stopped: EC2 answers IncorrectInstanceState for a running
    one) to `size`, same disk, zone and addresses, each read back until EC2 says `size`;
    EC2's (code, message) when it refuses."""
    from botocore.exceptions import ClientError

    ec2 = _ec2(target)
    try:
        for box_id in box_ids:
            ec2.modify_instance_attribute(InstanceId=box_id, InstanceType={"Value": size})
        for box_id in box_ids:
            _read_back(ec2, box_id, size)
    except ClientError as error:
        detail = error.response.get("Error", {})
        return str(detail.get("Code", "")), str(detail.get("Message", ""))
    except _errors() as error:
        raise Exit(_refused(f"resize the boxes to {size}", target, error)) from None
    return None


def _read_back(ec2: Any, box_id: str, size: str) -> None:
    """Return once EC2 reads `box_id`'s instance type back as `size`. EC2 is eventually
    consistent: a change it accepted may not show (nor hold for a StartInstances) at
    once, so its Describe is asked again with a growing wait
    (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html)."""
    wait, give_up = READ_BACK_FIRST_SECONDS, time.monotonic() + READ_BACK_SECONDS
    while True:
        found = ec2.describe_instance_attribute(InstanceId=box_id, Attribute="instanceType")
        if found["InstanceType"]["Value"] == size:
            return
        if time.monotonic() + wait > give_up:
            raise Exit(
                f"EC2 accepted {size} for {box_id} but still reads "
                f"{found['InstanceType']['Value']} after {READ_BACK_SECONDS} s; run `fab "
                "start` again (it starts from the stack's first choice)"
            )
        time.sleep(wait)
        wait = min(wait * 2, READ_BACK_LONGEST_SECONDS)


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


def set_deadline(target: Target, until: datetime.datetime, past_daily_stop: bool) -> None:
    """The boxes' hard stop is `until` (UTC): moved there when it is past the daily
    stop, else the daily stop as declared (and any earlier run's move undone)."""
    if not past_daily_stop:
        clear_deadline(target)
        return
    scheduler = _client(target, "scheduler")
    try:
        daily = _daily(scheduler, target)
        fields = {
            "Name": _deadline_name(target),
            "ScheduleExpression": f"at({until.astimezone(datetime.timezone.utc):{AT_FORMAT}})",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": daily["Target"],
            "ActionAfterCompletion": "DELETE",
            "Description": f"Stop the boxes of {daily['Name']} at the run's deadline",
        }
        if deadline(target) is None:
            scheduler.create_schedule(**fields)
        else:
            scheduler.update_schedule(**fields)
        # Created first: a daily stop moved without its replacement would leave no stop.
        _update_daily(scheduler, daily, StartDate=until)
    except _errors() as error:
        raise Exit(_refused("move the daily stop", target, error)) from None


def clear_deadline(target: Target) -> None:
    """The daily stop as declared again, and no one-time stop."""
    scheduler = _client(target, "scheduler")
    try:
        daily = _daily(scheduler, target)
        if daily.get("StartDate") is not None:
            _update_daily(scheduler, daily)
        if deadline(target) is not None:
            scheduler.delete_schedule(Name=_deadline_name(target))
    except _errors() as error:
        raise Exit(_refused("restore the daily stop", target, error)) from None


def deadline(target: Target) -> datetime.datetime | None:
    """When the one-time stop a deadline set fires (UTC), or None when there is none."""
    from botocore.exceptions import ClientError

    try:
        schedule = _client(target, "scheduler").get_schedule(Name=_deadline_name(target))
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return None
        raise Exit(_refused("read the deadline", target, error)) from None
    at = schedule["ScheduleExpression"].removeprefix("at(").removesuffix(")")
    return datetime.datetime.strptime(at, AT_FORMAT).replace(tzinfo=datetime.timezone.utc)


def recovery_gaps(target: Target, until: datetime.datetime) -> list[str]:
    """Boxes EC2 would not bring back after an interruption before `until`: a spot box
    needs a live persistent request that stops it, valid past the deadline (an
    on-demand box's host failure is EC2's automatic recovery, on by default)."""
    if not target.spot:
        return []
    try:
        pages = (
            _ec2(target)
            .get_paginator("describe_spot_instance_requests")
            .paginate(Filters=[{"Name": "instance-id", "Values": list(target.box_ids)}])
        )
        requests = {
            request.get("InstanceId"): request
            for page in pages
            for request in page["SpotInstanceRequests"]
            if request["State"] in LIVE_STATES
        }
    except _errors() as error:
        raise Exit(_refused("describe the spot requests", target, error)) from None
    gaps = []
    for node, box_id in enumerate(target.box_ids):
        request = requests.get(box_id)
        lapses = (request or {}).get("ValidUntil")
        if request is None or request.get("Type") != "persistent":
            gaps.append(f"box {node} ({box_id}) has no live persistent spot request")
        elif lapses is not None and lapses < until:
            gaps.append(
                f"box {node} ({box_id})'s spot request lapses {lapses:%Y-%m-%d %H:%M} UTC, "
                "before the deadline"
            )
    return [
        f"{gap}: an interruption then is not brought back; replace the box (`pulumi up "
        "--replace` on it) to renew its request for a year"
        for gap in gaps
    ]


def _deadline_name(target: Target) -> str:
    return target.daily_stop_schedules[0][: 64 - len(DEADLINE_SUFFIX)] + DEADLINE_SUFFIX


def _daily(scheduler: Any, target: Target) -> dict[str, Any]:
    if not target.daily_stop_schedules:
        raise Exit(
            f"{target.source} names no daily stop schedule (dailyStopSchedules): run "
            "`pulumi up` with this version, then retry"
        )
    return scheduler.get_schedule(Name=target.daily_stop_schedules[0])


def _update_daily(scheduler: Any, daily: dict[str, Any], **changes: Any) -> None:
    """UpdateSchedule resets what it is not given: send every field back, and `changes`."""
    kept = ("Name", "GroupName", "ScheduleExpression", "ScheduleExpressionTimezone",
            "FlexibleTimeWindow", "Target", "State", "Description", "EndDate", "KmsKeyArn",
            "ActionAfterCompletion")  # fmt: skip
    fields = {key: daily[key] for key in kept if daily.get(key) is not None}
    scheduler.update_schedule(**fields, **changes)
