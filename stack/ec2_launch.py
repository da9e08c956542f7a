"""Launch a stack's AWS boxes through EC2's own engine, in the stack's order of candidates.

- On-demand: one `CreateFleet` of type `instant` whose overrides are the candidates
  (size x zone, one subnet per zone) with their rank as `Priority`, allocation
  `prioritized`, one size and one zone for all boxes, and `MinTargetCapacity` = the
  box count: EC2 itself walks the list and launches every box or none. Every instance
  the answer lists is used even when `Errors` is not empty; no instance (with or
  without an exception) is a failure naming every candidate.
- Spot: instant fleets cannot stop on an interruption, so each spot pool (size x zone)
  is one `RunInstances` of all the boxes with a persistent request that stops
  (`MinCount` = `MaxCount`: all or none), tried in order; `spotFallback` adds the
  on-demand fleet after the last pool.

The launch template holds every setting of a box (image, key, role, disk, metadata,
shutdown = stop, user data); a candidate only picks the size and the subnet. The launch
request itself tags what it makes (TagSpecifications: the stack's tags and the launch's
own, stack/ec2_boxes.py's LAUNCH_TAG, on the instances, and for spot on their volumes and
requests too), so that no box EC2 launches is ever without them, and carries a client
token, so that a retried call launches nothing twice
(https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html). Then each
box is named by its rank and boxes 1..N-1 leave the SSH group (only box 0 is reached from
outside): a name per rank cannot be said in one request. Those calls, and the read of
what was launched, are retried while EC2 does not know the instances yet (eventual
consistency, stack/ec2_boxes.py); should one fail anyway, every box of the launch is let
go (requests cancelled, instances terminated) before LaunchReleased says what was.
Runs in Pulumi's provider host (pulumi/infra/aws/boxes.py) with the deployer's
credentials; the caller brings the boto3 client, built with bounded timeouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stack import ec2_boxes
from stack.ec2_boxes import LAUNCH_TAG, until_found
from stack.placement import (
    NOT_TRIED,
    ON_DEMAND,
    OTHER,
    SPOT,
    Candidate,
    Tried,
    in_order,
    nothing_left,
    refusal_kind,
)
from stack.spot_requests import spot_request_valid_until

# What the launch request tags (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# API_RunInstances.html, API_CreateFleet.html: an instant fleet tags only instances; the
# launch template tags their volumes).
SPOT_TAGGED = ("instance", "volume", "spot-instances-request")
FLEET_TAGGED = ("instance",)


class LaunchError(RuntimeError):
    """No candidate took the boxes; `tried` says why for each."""

    def __init__(self, message: str, tried: list[Tried]) -> None:
        super().__init__(message)
        self.tried = tried


class LaunchReleased(RuntimeError):
    """EC2 launched the boxes, a call after failed, and the boxes were let go (or could not
    be: the message says which ids may still bill)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to launch, as the dynamic resource's inputs carry it."""

    launch_template_id: str
    launch_template_version: str
    count: int
    candidates: tuple[Candidate, ...]
    subnets: Mapping[str, str]
    """Zone -> the stack's subnet there."""
    groups: tuple[tuple[str, ...], ...]
    """Each rank's security groups; rank 0's are the launch template's."""
    name_prefix: str
    """Box `r` is tagged Name=<prefix>-<r>."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """The stack's tags, on everything the launch makes."""
    launch_id: str = ""
    """This launch's own tag value (LAUNCH_TAG) and client tokens' stem."""

    @property
    def template(self) -> dict[str, str]:
        return {
            "LaunchTemplateId": self.launch_template_id,
            "Version": self.launch_template_version,
        }

    def tag_specifications(self, resource_types: tuple[str, ...]) -> list[dict[str, Any]]:
        tags = {**self.tags, LAUNCH_TAG: self.launch_id}
        pairs = [{"Key": key, "Value": value} for key, value in tags.items() if value]
        return [{"ResourceType": kind, "Tags": pairs} for kind in resource_types]

    def client_token(self, *parts: str) -> dict[str, str]:
        """ClientToken for one launch call (at most 64 ASCII characters), none without an id."""
        return {"ClientToken": "-".join((self.launch_id, *parts))[:64]} if self.launch_id else {}


@dataclass
class Launched:
    """The boxes, rank order, where they went, and EC2's description of each."""

    instance_ids: list[str]
    taken: Candidate
    tried: list[Tried] = field(default_factory=list)
    described: list[dict[str, Any]] = field(default_factory=list)

    @property
    def private_ips(self) -> list[str]:
        return [i.get("PrivateIpAddress", "") for i in self.described]

    @property
    def image_id(self) -> str:
        return self.described[0].get("ImageId", "") if self.described else ""

    @property
    def spot_request_ids(self) -> list[str]:
        return [i.get("SpotInstanceRequestId", "") for i in self.described]


def launch(ec2: Any, spec: LaunchSpec) -> Launched:
    """Every box, on the first candidate that takes them all; LaunchError when none does,
    LaunchReleased when EC2 launched them but they could not be settled."""
    tried: list[Tried] = []
    for candidate in (c for c in spec.candidates if c.market == SPOT):
        ids, refusal = _spot_pool(ec2, spec, candidate)
        if ids:
            return _kept(ec2, spec, ids, candidate, tried)
        tried.append(Tried(candidate, refusal))
    on_demand = [c for c in spec.candidates if c.market == ON_DEMAND]
    if on_demand:
        ids, taken, refused = _fleet(ec2, spec, on_demand)
        tried += refused
        if taken is not None:
            return _kept(ec2, spec, ids, taken, tried)
    tried = in_order(tried, spec.candidates)
    raise LaunchError(nothing_left(tried, spec.count), tried)


def fleet_request(spec: LaunchSpec, candidates: list[Candidate]) -> dict[str, Any]:
    """CreateFleet's input: one override per candidate, ranked in the stack's order."""
    overrides = [
        {"InstanceType": c.size, "SubnetId": spec.subnets[c.zone], "Priority": float(rank)}
        for rank, c in enumerate(candidates)
    ]
    return {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": spec.count,
            "DefaultTargetCapacityType": ON_DEMAND,
        },
        "OnDemandOptions": {
            "AllocationStrategy": "prioritized",
            # Every box of one size in one zone (the cluster placement group's), and all
            # of them or none: a half-launched cluster bills and cannot train.
            "SingleInstanceType": True,
            "SingleAvailabilityZone": True,
            "MinTargetCapacity": spec.count,
        },
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": spec.template, "Overrides": overrides}
        ],
        "TagSpecifications": spec.tag_specifications(FLEET_TAGGED),
        **spec.client_token("fleet"),
    }


def _fleet(
    ec2: Any, spec: LaunchSpec, candidates: list[Candidate]
) -> tuple[list[str], Candidate | None, list[Tried]]:
    """(instance ids, the candidate that took them, the refused) of one instant fleet."""
    answer = ec2.create_fleet(**fleet_request(spec, candidates))
    zones = {subnet: zone for zone, subnet in spec.subnets.items()}
    errors: dict[Candidate, str] = {}
    for error in answer.get("Errors") or []:
        candidate = _candidate_of(error, zones)
        if candidate is not None:
            errors.setdefault(candidate, f"{error.get('ErrorCode')}: {error.get('ErrorMessage')}")
    ids: list[str] = []
    taken = None
    for group in answer.get("Instances") or []:
        ids += group.get("InstanceIds") or []
        taken = taken or _candidate_of(group, zones)
    if ids and (taken is None or len(ids) < spec.count):
        # Not all of them: EC2 should never do this with MinTargetCapacity; bill nothing.
        ec2_boxes.release(ec2, ids, [], spec.launch_id, just_launched=True)
        errors[taken or candidates[0]] = f"only {len(ids)} of {spec.count} boxes launched"
        ids, taken = [], None
    refused = []
    for candidate in candidates:
        if candidate == taken:
            continue
        late = taken is not None and candidates.index(candidate) > candidates.index(taken)
        default = NOT_TRIED if late else "refused by EC2 Fleet, which gave no reason"
        refused.append(Tried(candidate, errors.get(candidate, default)))
    return ids, taken, refused


def _candidate_of(entry: Mapping[str, Any], zones: Mapping[str, str]) -> Candidate | None:
    overrides = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    zone = zones.get(overrides.get("SubnetId", ""), overrides.get("AvailabilityZone", ""))
    if not overrides.get("InstanceType") or not zone:
        return None
    return Candidate(overrides["InstanceType"], zone, ON_DEMAND)


def spot_request(spec: LaunchSpec, candidate: Candidate) -> dict[str, Any]:
    """RunInstances' input for one spot pool: every box, persistent requests that stop."""
    options = {
        "SpotInstanceType": "persistent",
        "InstanceInterruptionBehavior": "stop",
        # Left out, a persistent request lapses 7 days after launch, and after that
        # nothing brings an interrupted box back (stack/spot_requests.py).
        "ValidUntil": spot_request_valid_until(),
    }
    return {
        "LaunchTemplate": spec.template,
        "InstanceType": candidate.size,
        "SubnetId": spec.subnets[candidate.zone],
        "MinCount": spec.count,
        "MaxCount": spec.count,
        "InstanceMarketOptions": {"MarketType": SPOT, "SpotOptions": options},
        "TagSpecifications": spec.tag_specifications(SPOT_TAGGED),
        **spec.client_token(candidate.size, candidate.zone),
    }


def _spot_pool(ec2: Any, spec: LaunchSpec, candidate: Candidate) -> tuple[list[str], str]:
    """All boxes as persistent spot that stops, in one pool; ([], why) when refused."""
    from botocore.exceptions import ClientError

    try:
        answer = ec2.run_instances(**spot_request(spec, candidate))
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if refusal_kind(code, message) == OTHER:
            raise
        return [], f"{code}: {message}"
    return [instance["InstanceId"] for instance in answer.get("Instances", [])], ""


def _kept(
    ec2: Any, spec: LaunchSpec, ids: list[str], taken: Candidate, tried: list[Tried]
) -> Launched:
    """The launched boxes settled, or, when that fails, let go before anything is raised:
    a box Pulumi never hears of would bill outside every guard rail."""
    try:
        return _settled(ec2, spec, ids, taken, tried)
    except Exception as error:
        head = f"EC2 launched {', '.join(sorted(ids))} on {taken.label}, then {error}"
        try:
            released = ec2_boxes.release(ec2, ids, [], spec.launch_id, just_launched=True)
        except Exception as failed:
            raise LaunchReleased(
                f"{head}; letting them go failed too ({failed}): they may still bill, with "
                f"their spot requests: find them by tag {LAUNCH_TAG}={spec.launch_id} in "
                "the EC2 console and terminate them"
            ) from error
        raise LaunchReleased(f"{head}; released them: {released}") from error


def _settled(
    ec2: Any, spec: LaunchSpec, ids: list[str], taken: Candidate, tried: list[Tried]
) -> Launched:
    """Name each box by its rank, give each its rank's security groups, read them back."""
    ranked = sorted(ids)
    for rank, instance_id in enumerate(ranked):
        name = [{"Key": "Name", "Value": f"{spec.name_prefix}-{rank}"}]
        until_found(lambda i=instance_id, n=name: ec2.create_tags(Resources=[i], Tags=n))
        if rank and spec.groups[rank] != spec.groups[0]:
            groups = list(spec.groups[rank])
            until_found(
                lambda i=instance_id, g=groups: ec2.modify_instance_attribute(
                    InstanceId=i, Groups=g
                )
            )
    described = until_found(lambda: ec2_boxes.describe_all(ec2, ranked))
    later = [c for c in spec.candidates if c != taken and c not in {t.candidate for t in tried}]
    record = tried + [Tried(taken, "")] + [Tried(c, NOT_TRIED) for c in later]
    return Launched(ranked, taken, in_order(record, spec.candidates), described)


# The provider pickled into the state of stacks made before the boxes' record and tag
# (pulumi/infra/aws/boxes.py before `providerCode`) calls these two on refresh and
# destroy, until a `pulumi up` stores the new one.
def describe(ec2: Any, ids: list[str]) -> list[dict[str, Any] | None]:
    """Each box as EC2 describes it now, in the order of `ids` (None where it is gone)."""
    found = ec2_boxes.describe(ec2, ids)
    return [found.get(instance_id) for instance_id in ids]


def release(ec2: Any, ids: list[str]) -> None:
    """Let go of the boxes and of every spot request behind them (stack/ec2_boxes.py)."""
    ec2_boxes.release(ec2, ids, [], "")
