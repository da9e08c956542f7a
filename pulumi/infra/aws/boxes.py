"""The AWS boxes themselves: a dynamic resource that launches them through EC2's engine.

Why not `aws.ec2.Instance`: it takes one size in one subnet, and an
`InsufficientInstanceCapacity` fails the whole `pulumi up`. Why not the typed
`aws.ec2.Fleet`: it reports neither the zone taken nor the errors of the candidates
EC2 refused. This resource's provider calls CreateFleet (type `instant`, prioritized
overrides) and, for spot, RunInstances pool by pool (stack/ec2_launch.py says how),
and keeps what was taken (`placement`) and why every other candidate was not
(`placementTried`) as its outputs.

What replaces the boxes: another launch template (another stack), another box count,
another pinned `amiId`, another region. What does not: the order of `fallbackVmSizes`
or `zones`, a new launch template version (new user data or a newer AMI: the running
boxes keep theirs, as before), the candidates themselves: they decide only where a
launch goes. `pulumi refresh` reads the boxes' sizes and zones back (after `fab start`
resized them in place). Delete cancels each box's persistent spot request before it
terminates the box (else EC2 would launch a new one, untracked), and waits for the
termination so the subnets and groups can go after it.

The provider runs in the deployer's process with the deployer's AWS credentials
(`aws:profile` when the stack sets one). Its class is built inside a function so that
Pulumi's serializer (dill) stores it by value: the provider host need not import this
program's `infra` package, only `stack`, which is installed.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi import dynamic

from stack.placement import Candidate, Tried

# Inputs whose change means other boxes: the rest only steer a launch that is done.
REPLACING_INPUTS = ("launchTemplateId", "count", "pinnedImageId", "region")
# What a launch found out, kept through updates: the boxes do not move on an update.
LAUNCH_OUTPUTS = (
    "instanceIds",
    "privateIps",
    "imageId",
    "spotRequestIds",
    "placement",
    "placementTried",
)
# Each call's bound: EC2 answers in seconds; a hung connection must not hang `pulumi up`.
CONNECT_TIMEOUT_SECONDS = 10
READ_TIMEOUT_SECONDS = 60


class Ec2Boxes(dynamic.Resource, module="glucose-training", name="Ec2Boxes"):
    """`count` boxes on the first candidate EC2 can launch them all on."""

    # The provider's own output names.
    instanceIds: pulumi.Output[list[str]]
    privateIps: pulumi.Output[list[str]]
    imageId: pulumi.Output[str]
    placement: pulumi.Output[dict[str, str]]
    placementTried: pulumi.Output[list[dict[str, str]]]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        opts: pulumi.ResourceOptions,
    ) -> None:
        outputs = {key: None for key in LAUNCH_OUTPUTS}
        super().__init__(boxes_provider(), name, {**props, **outputs}, opts)


def launch_props(
    *,
    region: str,
    launch_template: Any,
    count: int,
    candidates: list[Candidate],
    dropped: list[Tried],
    subnets: dict[str, Any],
    groups: list[list[Any]],
    name_prefix: str,
    pinned_image_id: str,
) -> dict[str, Any]:
    """The resource's inputs (camelCase, as the provider reads them)."""
    return {
        "region": region,
        "profile": pulumi.Config("aws").get("profile") or "",
        "launchTemplateId": launch_template.id,
        "launchTemplateVersion": launch_template.latest_version.apply(str),
        "count": count,
        "candidates": [c.to_json() for c in candidates],
        "dropped": [t.to_json() for t in dropped],
        "subnets": subnets,
        "groups": groups,
        "namePrefix": name_prefix,
        "pinnedImageId": pinned_image_id,
    }


def boxes_provider() -> dynamic.ResourceProvider:
    """Create/diff/update/read/delete, as a class Pulumi can ship to its provider host."""
    # Locals, not the module's names: the provider host cannot import this module.
    replacing, kept = REPLACING_INPUTS, LAUNCH_OUTPUTS
    timeouts = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "read_timeout": READ_TIMEOUT_SECONDS}

    class Ec2BoxesProvider(dynamic.ResourceProvider):
        def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
            from stack import ec2_launch
            from stack.placement import Candidate, Tried, in_order, nothing_left

            spec = ec2_launch.LaunchSpec(
                launch_template_id=props["launchTemplateId"],
                launch_template_version=str(props["launchTemplateVersion"]),
                count=int(props["count"]),
                candidates=tuple(Candidate.from_json(c) for c in props["candidates"]),
                subnets=dict(props["subnets"]),
                groups=tuple(tuple(g) for g in props["groups"]),
                name_prefix=props["namePrefix"],
            )
            dropped = [Tried.from_json(t) for t in props.get("dropped") or []]
            try:
                launched = ec2_launch.launch(_ec2(props), spec)
            except ec2_launch.LaunchError as error:
                everything = in_order(error.tried + dropped, spec.candidates)
                raise RuntimeError(nothing_left(everything, spec.count)) from None
            described = ec2_launch.describe(_ec2(props), launched.instance_ids)
            outputs = {
                "instanceIds": launched.instance_ids,
                "privateIps": [(i or {}).get("PrivateIpAddress", "") for i in described],
                "imageId": (described[0] or {}).get("ImageId", ""),
                "spotRequestIds": [(i or {}).get("SpotInstanceRequestId", "") for i in described],
                "placement": launched.taken.to_json(),
                "placementTried": [t.to_json() for t in launched.tried + dropped],
            }
            return dynamic.CreateResult(launched.instance_ids[0], {**props, **outputs})

        def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
            changed = [k for k in news if k not in kept and olds.get(k) != news.get(k)]
            return dynamic.DiffResult(
                changes=bool(changed),
                replaces=[k for k in changed if k in replacing],
                delete_before_replace=False,
            )

        def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]):
            # The boxes stay: only the inputs that steer a future launch are new.
            return dynamic.UpdateResult({**news, **{k: olds.get(k) for k in kept}})

        def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
            from stack import ec2_launch

            described = ec2_launch.describe(_ec2(props), list(props.get("instanceIds") or []))
            first = described[0] if described else None
            if first is None:
                return dynamic.ReadResult(id_, props)
            placement = {
                **(props.get("placement") or {}),
                "size": first["InstanceType"],
                "zone": first["Placement"]["AvailabilityZone"],
            }
            return dynamic.ReadResult(id_, {**props, "placement": placement})

        def delete(self, _id: str, props: dict[str, Any]) -> None:
            from stack import ec2_launch

            ec2 = _ec2(props)
            live = [
                instance["InstanceId"]
                for instance in ec2_launch.describe(ec2, list(props.get("instanceIds") or []))
                if instance is not None and instance["State"]["Name"] != "terminated"
            ]
            ec2_launch.release(ec2, live)

    def _ec2(props: dict[str, Any]) -> Any:
        import boto3
        from botocore.config import Config

        session = boto3.Session(
            profile_name=props.get("profile") or None, region_name=props["region"]
        )
        bounded = Config(**timeouts, retries={"max_attempts": 3, "mode": "standard"})
        return session.client("ec2", config=bounded)

    return Ec2BoxesProvider()
