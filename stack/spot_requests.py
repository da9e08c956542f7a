"""Cancel the persistent spot requests behind a stack's EC2 boxes.

A persistent spot request outlives the instance it launched: terminate the instance
and AWS launches a new one, which no stack tracks
(https://github.com/hashicorp/terraform-provider-aws/issues/38142). Cancelling the
request first leaves the instance running, for `pulumi destroy` to terminate.

The boxes' own dynamic resource (pulumi/infra/aws/boxes.py, through stack/ec2_launch.py)
calls this before it terminates a box; it runs in the deployer's process with the
deployer's AWS credentials. boto3 is imported by the caller, not here.
"""

from __future__ import annotations

import datetime
from typing import Any

# States in which a request can still launch or relaunch an instance.
LIVE_STATES = ("open", "active", "disabled")
# How long a box's persistent request brings it back after an interruption. EC2's own
# default is 7 days from launch; no reference states a maximum. A box older than this
# still runs but is no longer restarted after an interruption: `fab train` says so.
SPOT_REQUEST_DAYS = 365


def spot_request_valid_until(now: datetime.datetime | None = None) -> str:
    """ValidUntil of a new box's spot request, in the UTC form EC2 takes."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    until = now + datetime.timedelta(days=SPOT_REQUEST_DAYS)
    return until.strftime("%Y-%m-%dT%H:%M:%SZ")


def live_requests(ec2: Any, request_ids: list[str], instance_id: str | None) -> list[str]:
    """Ids among `request_ids`, or behind `instance_id`, that can still launch an instance."""
    found: dict[str, dict] = {}
    if request_ids:
        filters = [{"Name": "spot-instance-request-id", "Values": list(request_ids)}]
        for request in ec2.describe_spot_instance_requests(Filters=filters)["SpotInstanceRequests"]:
            found[request["SpotInstanceRequestId"]] = request
    if instance_id:
        filters = [{"Name": "instance-id", "Values": [instance_id]}]
        for request in ec2.describe_spot_instance_requests(Filters=filters)["SpotInstanceRequests"]:
            found[request["SpotInstanceRequestId"]] = request
    return sorted(rid for rid, request in found.items() if request["State"] in LIVE_STATES)


def cancel_live_requests(ec2: Any, request_ids: list[str], instance_id: str | None) -> list[str]:
    """Cancel every live request of the instance; returns the ids cancelled (idempotent)."""
    live = live_requests(ec2, request_ids, instance_id)
    if live:
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=live)
    return live
