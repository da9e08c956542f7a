"""The AWS boxes themselves: a dynamic resource that launches them through EC2's engine.

Why not `aws.ec2.Instance`: it takes one size in one subnet, and an
`InsufficientInstanceCapacity` fails the whole `pulumi up`. Why not the typed
`aws.ec2.Fleet`: it reports neither the zone taken nor the errors of the candidates
EC2 refused. This resource's provider calls CreateFleet (type `instant`, prioritized
overrides) and, for spot, RunInstances pool by pool (stack/ec2_launch.py says how),
and keeps what was taken (`placement`) and why every other candidate was not
(`placementTried`) as its outputs.

What replaces the boxes: another launch template (another stack), another box count,
another region, a pinned `amiId` other than the image the boxes boot (pinning the one
they boot, or un-pinning, changes nothing), and a set with fewer live boxes than
`count` (refreshed after one was lost: the cluster is made again whole). What does not:
the order of `fallbackVmSizes` or `zones`, a new launch template version (new user data
or a newer AMI: the running boxes keep theirs, as before), the candidates themselves:
they decide only where a launch goes. `dropped` (read from EC2's offerings at each run)
and the pickled provider are never compared: a routine `pulumi up` shows no change.

`pulumi refresh` reads every box back: its size and zone (after `fab start` resized it
in place), and a box its persistent spot request launched again under a new id after it
was terminated. When no box and no live spot request is left, the read answers an empty
id, which tells Pulumi the resource is gone ("The ID of the resource ... or blank if
missing": https://www.pulumi.com/docs/reference/pkg/nodejs/pulumi/pulumi/interfaces/provider.ReadResult.html):
refresh drops it, and the next `pulumi up` launches the boxes again. `pulumi import`
cannot adopt a set: an import's read carries nothing but an id, not even the pickled
provider (https://github.com/pulumi/pulumi/issues/16175), and the boxes are found from the
record a launch keeps; a read without that record refuses in one line. Delete lets go of
everything the launch holds, by record, request and tag (stack/ec2_boxes.py): every
persistent spot request cancelled first, whatever its instance's state, then the
instances terminated and waited for, so the subnets and groups can go after them.

The provider runs in the deployer's process with the deployer's AWS credentials
(`aws:profile` when the stack sets one). Its class is built inside a function so that
Pulumi's serializer (dill) stores it by value: the provider host need not import this
program's `infra` package, only `stack`, which is installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pulumi
from pulumi import dynamic

from stack.placement import Candidate, Tried

# Inputs whose change means other boxes (`pinnedImageId`: only another image than the
# boxes boot).
REPLACING_INPUTS = ("launchTemplateId", "count", "pinnedImageId", "region")
# Inputs that only steer a launch to come: a change updates the record, not the boxes.
STEERING_INPUTS = (
    "launchTemplateVersion",
    "candidates",
    "subnets",
    "groups",
    "namePrefix",
    "profile",
    "tags",
    "providerCode",
)
# What a launch found out, kept through updates: the boxes do not move on an update.
LAUNCH_OUTPUTS = (
    "instanceIds",
    "privateIps",
    "imageId",
    "spotRequestIds",
    "placement",
    "placementTried",
    "launchId",
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
    tags: dict[str, str],
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
        "tags": tags,
        "providerCode": provider_code(),
    }


def provider_code() -> str:
    """A digest of this module, the pickled provider's source: a new one is an update
    that stores the new provider in the state, which `pulumi destroy` runs. Not the
    pickle itself (`__provider`): it holds this file's path and the Python version's
    bytecode, so another checkout or interpreter would show a change at every `up`."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def boxes_provider() -> dynamic.ResourceProvider:
    """Create/diff/update/read/delete, as a class Pulumi can ship to its provider host."""
    # Locals, not the module's names: the provider host cannot import this module.
    replacing, steering, kept = REPLACING_INPUTS, STEERING_INPUTS, LAUNCH_OUTPUTS
    timeouts = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "read_timeout": READ_TIMEOUT_SECONDS}

    class Ec2BoxesProvider(dynamic.ResourceProvider):
        def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
            import uuid

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
                tags=dict(props.get("tags") or {}),
                launch_id=uuid.uuid4().hex[:16],
            )
            dropped = [Tried.from_json(t) for t in props.get("dropped") or []]
            try:
                launched = ec2_launch.launch(_ec2(props), spec)
            except ec2_launch.LaunchError as error:
                everything = in_order(error.tried + dropped, spec.candidates)
                raise RuntimeError(nothing_left(everything, spec.count)) from None
            except ec2_launch.LaunchReleased as error:
                raise RuntimeError(str(error)) from None
            outputs = {
                "instanceIds": launched.instance_ids,
                "privateIps": launched.private_ips,
                "imageId": launched.image_id,
                "spotRequestIds": launched.spot_request_ids,
                "placement": launched.taken.to_json(),
                "placementTried": [t.to_json() for t in launched.tried + dropped],
                "launchId": spec.launch_id,
            }
            return dynamic.CreateResult(launched.instance_ids[0], {**props, **outputs})

        def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
            compared = [k for k in (*replacing, *steering) if k != "pinnedImageId"]
            changed = [k for k in compared if olds.get(k) != news.get(k)]
            replaces = [k for k in changed if k in replacing]
            if _another_image(olds, news):
                changed.append("pinnedImageId")
                replaces.append("pinnedImageId")
            if _boxes_lost(olds) and "count" not in replaces:
                changed.append("count")
                replaces.append("count")
            return dynamic.DiffResult(
                changes=bool(changed), replaces=replaces, delete_before_replace=False
            )

        def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]):
            # The boxes stay: only the inputs that steer a future launch are new.
            return dynamic.UpdateResult({**news, **{k: olds.get(k) for k in kept}})

        def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
            from stack import ec2_boxes

            recorded = list(props.get("instanceIds") or [])
            if not recorded:
                raise RuntimeError(
                    f"{id_}: the boxes cannot be imported or read without the record "
                    "`pulumi up` keeps (an import's read carries only an id: "
                    "pulumi/pulumi#16175); terminate strays in the EC2 console and let "
                    "`pulumi up` launch the stack's own"
                )
            requests = list(props.get("spotRequestIds") or [])
            held = ec2_boxes.holdings(_ec2(props), recorded, requests, props.get("launchId", ""))
            live = [box for box in held.by_rank(recorded, requests) if box is not None]
            if not live and not held.live_requests:
                return dynamic.ReadResult("", {})  # gone: refresh drops it, `up` relaunches
            outs = {**props, "instanceIds": [b["InstanceId"] for b in live]}
            outs["privateIps"] = [b.get("PrivateIpAddress", "") for b in live]
            if live:
                outs["placement"] = {
                    **(props.get("placement") or {}),
                    "size": live[0]["InstanceType"],
                    "zone": live[0]["Placement"]["AvailabilityZone"],
                }
            return dynamic.ReadResult(id_, outs)

        def delete(self, _id: str, props: dict[str, Any]) -> None:
            from stack import ec2_boxes

            ec2_boxes.release(
                _ec2(props),
                props.get("instanceIds") or [],
                props.get("spotRequestIds") or [],
                props.get("launchId") or "",
            )

    def _another_image(olds: dict[str, Any], news: dict[str, Any]) -> bool:
        """A pinned image other than the one the boxes boot (un-pinned: whatever they boot)."""
        pinned = news.get("pinnedImageId") or ""
        return bool(pinned) and pinned != (olds.get("imageId") or olds.get("pinnedImageId"))

    def _boxes_lost(olds: dict[str, Any]) -> bool:
        """Fewer live boxes than `count` were read back: a cluster short of a box."""
        ids = olds.get("instanceIds")
        return isinstance(ids, list) and len(ids) < int(olds.get("count") or 0)

    def _ec2(props: dict[str, Any]) -> Any:
        import boto3
        from botocore.config import Config

        session = boto3.Session(
            profile_name=props.get("profile") or None, region_name=props["region"]
        )
        bounded = Config(**timeouts, retries={"max_attempts": 3, "mode": "standard"})
        return session.client("ec2", config=bounded)

    return Ec2BoxesProvider()
