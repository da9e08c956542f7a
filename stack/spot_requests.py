"""Cancel the persistent spot requests behind a stack's EC2 boxes.

A persistent spot request outlives the instance it launched: terminate the instance
and AWS launches a new one, which no stack tracks
(https://github.com/hashicorp/terraform-provider-aws/issues/38142). Cancelling the
request first leaves the instance running, for `pulumi destroy` to terminate.

The Pulumi program's spot-request guard (pulumi/infra/aws/spot_requests.py) calls this
when an instance is about to be deleted or replaced; it runs in the deployer's process
with the deployer's AWS credentials. boto3 is imported by the caller, not here.
"""

from __future__ import annotations

from typing import Any

# States in which a request can still launch or relaunch an instance.
LIVE_STATES = ("open", "active", "disabled")


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
