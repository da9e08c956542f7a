"""The persistent spot requests behind a stack's EC2 boxes: their lifetime, found, cancelled.

A persistent request stays active until it expires or is cancelled, even once fulfilled
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-requests.html); it launches a
new instance when its own is interrupted or terminated, by hand or by EC2, and
cancelling it does not terminate its instance
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-instances-cancel.html;
https://github.com/hashicorp/terraform-provider-aws/issues/38142). So whoever lets the
boxes go cancels every request first, whatever its instance's state, then terminates
(stack/ec2_boxes.py).

A request is found three ways, any of which may be all that is left: by its id (the
boxes' resource records `spotRequestIds`), by the instance it launched, and by the
launch's tag, which RunInstances puts on the request itself (stack/ec2_launch.py).
Runs in the deployer's process with the deployer's AWS credentials; boto3 is imported
by the caller, not here.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
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


def find_requests(
    ec2: Any,
    request_ids: Iterable[str] = (),
    instance_ids: Iterable[str] = (),
    tag: tuple[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every request (any state) among `request_ids`, behind `instance_ids` or carrying
    `tag` (key, value), by id."""
    searches = [("spot-instance-request-id", request_ids), ("instance-id", instance_ids)]
    return {
        request["SpotInstanceRequestId"]: request
        for page in pages_matching(ec2, "describe_spot_instance_requests", searches, tag)
        for request in page["SpotInstanceRequests"]
    }


def pages_matching(
    ec2: Any,
    operation: str,
    searches: Iterable[tuple[str, Iterable[str]]],
    tag: tuple[str, str] | None,
) -> Iterator[dict[str, Any]]:
    """Every page of a Describe `operation` for each (filter, values) and for `tag` (key,
    value; none when the value is empty). Filters, not ids: an id EC2 does not list (no
    more, or not yet) is simply not there, where an id parameter fails the whole call."""
    wanted = [(name, sorted({v for v in values if v})) for name, values in searches]
    if tag is not None and tag[1]:
        wanted.append((f"tag:{tag[0]}", [tag[1]]))
    paginator = ec2.get_paginator(operation)
    for name, values in wanted:
        if values:
            yield from paginator.paginate(Filters=[{"Name": name, "Values": values}])


def live(requests: dict[str, dict[str, Any]]) -> list[str]:
    """The ids of the requests that can still launch an instance."""
    return sorted(rid for rid, request in requests.items() if request["State"] in LIVE_STATES)


def cancel(ec2: Any, request_ids: list[str]) -> list[str]:
    """Cancel the requests (idempotent: a cancelled one stays cancelled); the ids."""
    if request_ids:
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=list(request_ids))
    return list(request_ids)
