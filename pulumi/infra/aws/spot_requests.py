"""Nothing keeps billing after `pulumi destroy`: a guard for each persistent spot box.

A spot box must be persistent to stop (not terminate) when interrupted, so it resumes
on its own disk; but a persistent request outlives its instance, and AWS launches a
new one when the instance is terminated (stack/spot_requests.py says more). One-time
requests cannot stop on interruption, and `SpotInstanceRequest` does not tag the
instance it launches (the budget would not see it), so the instance stays an
`aws.ec2.Instance` and this small dynamic resource cancels its request first.

Ordering does the work: the guard depends on its instance, so Pulumi deletes the guard
before the instance, on `pulumi destroy` and when a replaced instance is cleaned up
(the guard's `spotRequestId` changes with the instance, which replaces the guard too).

The provider runs in the deployer's process with the deployer's AWS credentials
(`aws:profile` when the stack sets one). Its class is built inside a function so that
Pulumi's serializer (dill) stores it by value: the provider host need not be able to
import this program's `infra` package, only `ops`, which is installed.
"""

from __future__ import annotations

import datetime
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi import dynamic

# How long a box's persistent request brings it back after an interruption. EC2's own
# default is 7 days from launch; no reference states a maximum. A box older than this
# still runs but is no longer restarted after an interruption: `fab train` says so.
SPOT_REQUEST_DAYS = 365


def spot_request_valid_until(now: datetime.datetime | None = None) -> str:
    """ValidUntil of a new box's spot request, in the UTC form EC2 takes."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    until = now + datetime.timedelta(days=SPOT_REQUEST_DAYS)
    return until.strftime("%Y-%m-%dT%H:%M:%SZ")


class SpotRequestGuard(dynamic.Resource, module="glucose-training", name="SpotRequestGuard"):
    """Cancels `instance`'s persistent spot request before the instance is deleted."""

    def __init__(
        self,
        name: str,
        instance: aws.ec2.Instance,
        region: str,
        parent: pulumi.Resource,
    ) -> None:
        props = {
            "instanceId": instance.id,
            "spotRequestId": instance.spot_instance_request_id,
            "region": region,
            "profile": pulumi.Config("aws").get("profile") or "",
        }
        super().__init__(
            guard_provider(),
            name,
            props,
            pulumi.ResourceOptions(parent=parent, depends_on=[instance]),
        )


def guard_provider() -> dynamic.ResourceProvider:
    """The guard's create/diff/delete, as a class Pulumi can ship to its provider host."""

    class SpotRequestGuardProvider(dynamic.ResourceProvider):
        def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
            # Nothing to make: the request exists with the instance. Its id is ours.
            return dynamic.CreateResult(props.get("spotRequestId") or props["instanceId"], props)

        def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
            changed = [k for k in ("instanceId", "spotRequestId") if olds.get(k) != news.get(k)]
            settings = [k for k in ("region", "profile") if olds.get(k) != news.get(k)]
            return dynamic.DiffResult(
                changes=bool(changed or settings),
                replaces=changed,
                delete_before_replace=False,
            )

        def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]):
            return dynamic.UpdateResult(news)

        def delete(self, _id: str, props: dict[str, Any]) -> None:
            import boto3

            from stack.spot_requests import cancel_live_requests

            session = boto3.Session(
                profile_name=props.get("profile") or None, region_name=props["region"]
            )
            request = props.get("spotRequestId")
            cancel_live_requests(
                session.client("ec2"), [request] if request else [], props.get("instanceId")
            )

    return SpotRequestGuardProvider()
