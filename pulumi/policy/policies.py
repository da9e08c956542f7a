"""The glucose-training guard rails as Pulumi policies, for Azure and AWS stacks.

Each rule is a plain function `(args, report_violation)` so the tests call it directly
with recorded resources; `POLICIES` wraps them for the pack. Rules that link two
resources (a VM and its shutdown schedule, a bucket and its public-access block) are
stack policies: they match by the referenced id when it is known, and by the
engine's dependency graph when it is not (a first preview knows no ids yet).

Mandatory: every GPU box has a daily stop and sits under a budget; no SSH from
anywhere; storage never public; IMDSv2 on EC2; no password SSH on Azure VMs.
Advisory: a GPU box on on-demand capacity; storage that `pulumi destroy` deletes.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SCHEDULE = "aws:scheduler/schedule:Schedule"
AWS_BUDGET = "aws:budgets/budget:Budget"
AWS_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
AWS_BUCKET_ACLS = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
AWS_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
AWS_SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
AWS_SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# The program's own boxes: launched by EC2 Fleet from a launch template
# (pulumi/infra/aws/boxes.py); its instances are `instanceIds`, its sizes the candidates'.
AWS_BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
AWS_BOX_TYPES = (AWS_INSTANCE, AWS_BOXES)
AZURE_VM = "azure-native:compute:VirtualMachine"
AZURE_SCHEDULE = "azure-native:devtestlab:GlobalSchedule"
AZURE_BUDGET = "azure-native:consumption:Budget"
AZURE_RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
AZURE_NSG = "azure-native:network:NetworkSecurityGroup"
AZURE_SECURITY_RULE = "azure-native:network:SecurityRule"
AZURE_STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_CONTAINER = "azure-native:storage:BlobContainer"

STOP_INSTANCES_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
AWS_GPU_FAMILY = re.compile(r"^(p\d|g\d|gr\d|dl\d)", re.IGNORECASE)  # p3, p4d, p5, g5, g6...
AZURE_HHMM = re.compile(r"([01]\d|2[0-3])[0-5]\d")  # DevTestLab's daily time, e.g. 2130
AZURE_GPU_SIZE = re.compile(r"^Standard_N", re.IGNORECASE)  # the N-series are the GPU sizes
SSH_PORT = 22
ANYWHERE = {"0.0.0.0/0", "::/0", "*", "internet", "any"}
# A shorter prefix admits a sizeable share of the internet (0.0.0.0/1 is half of it):
# the same floor the stack config enforces (stack/config.py NARROWEST_BROAD_PREFIX), a
# copy: the pack runs without `stack`.
NARROWEST_BROAD_PREFIX = 8
PUBLIC_S3_ACLS = {"public-read", "public-read-write", "authenticated-read"}
PUBLIC_ACCESS_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)
# Both training-box components tag their storage (S3 bucket, Azure storage account)
# with it (stack/config.py KEEP_ON_DESTROY_TAG); retain_on_delete itself is no property.
KEEP_TAG = "keep-on-destroy"


def _get(value: Any, *path: str) -> Any:
    """props["a"]["b"]... or None where any step is missing or not a mapping."""
    for key in path:
        if not hasattr(value, "get"):
            return None
        value = value.get(key)
    return value


def _known(read: Callable[[], Any]) -> Any:
    """A value the engine may not know yet during preview; None then."""
    try:
        return read()
    except UnknownValueError:
        return None


def is_gpu_box(resource_type: str, props: Any) -> bool:
    """An EC2 instance of a GPU family (or boxes whose candidates are) or an Azure
    N-series VM."""
    if resource_type == AWS_INSTANCE:
        return bool(AWS_GPU_FAMILY.match(_known(lambda: props.get("instanceType")) or ""))
    if resource_type == AWS_BOXES:
        candidates = _known(lambda: props.get("candidates")) or []
        sizes = [_known(lambda c=c: c.get("size")) or "" for c in candidates]
        return any(AWS_GPU_FAMILY.match(size) for size in sizes)
    if resource_type == AZURE_VM:
        size = _known(lambda: _get(props, "hardwareProfile", "vmSize"))
        return bool(AZURE_GPU_SIZE.match(size or ""))
    return False


def _references(
    referrer: PolicyResource,
    target: PolicyResource,
    prop: str,
    values: list[Any] | None,
    key: str = "id",
) -> bool:
    """`referrer.prop` points at `target`: compared with `target.props[key]` when both
    are known (`values` None means unknown), else through the engine's record that
    `prop` was computed from `target`."""
    wanted = _known(lambda: target.props.get(key))
    if values is not None and wanted:
        return any(str(v).lower() == str(wanted).lower() for v in values if v)
    if prop in referrer.property_dependencies:
        linked = referrer.property_dependencies[prop]
    else:
        linked = referrer.dependencies
    return any(d.urn == target.urn for d in linked)


def _value(resource: PolicyResource, prop: str) -> list[Any] | None:
    """[props[prop]], or None while the engine does not know it."""
    value = _known(lambda: resource.props.get(prop))
    return None if value is None else [value]


# --- mandatory, per resource -----------------------------------------------------------


def no_ssh_from_anywhere(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """No inbound rule opens port 22 to the whole internet, on either cloud."""
    props, kind = args.props, args.resource_type
    if kind in (AZURE_NSG, AZURE_SECURITY_RULE):
        rules = (props.get("securityRules") or []) if kind == AZURE_NSG else [props]
        for rule in rules:
            if _azure_rule_opens_ssh_to_anywhere(rule):
                name = rule.get("name")
                report(f"security rule {name!r} admits SSH (22) from anywhere; use sshAllowedCidr")
        return
    for rule in _aws_ingress_rules(kind, props):
        cidrs = [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])]
        broad = [str(c) for c in cidrs if c and _is_broad(str(c))]
        if broad and _aws_rule_covers_ssh(rule):
            report(
                f"an ingress rule admits SSH (22) from {broad[0]} (broader than "
                f"/{NARROWEST_BROAD_PREFIX}); allow only sshAllowedCidr"
            )


def _is_broad(source: str) -> bool:
    """The whole internet, or a prefix broader than /8 of it."""
    if source.lower() in ANYWHERE:
        return True
    try:
        return ipaddress.ip_network(source, strict=False).prefixlen < NARROWEST_BROAD_PREFIX
    except ValueError:
        return False  # a service tag or a name: not an address range


def _aws_ingress_rules(kind: str, props: Any) -> list[Any]:
    """Inbound rules in the shape of a security group's inline `ingress` entries."""
    if kind == AWS_SECURITY_GROUP:
        return list(props.get("ingress") or [])
    if kind == AWS_SECURITY_GROUP_RULE and props.get("type") == "ingress":
        return [props]
    if kind == AWS_INGRESS_RULE:
        return [
            {
                "protocol": props.get("ipProtocol"),
                "fromPort": props.get("fromPort"),
                "toPort": props.get("toPort"),
                "cidrBlocks": [props.get("cidrIpv4")],
                "ipv6CidrBlocks": [props.get("cidrIpv6")],
            }
        ]
    return []


def _aws_rule_covers_ssh(rule: Any) -> bool:
    protocol = str(rule.get("protocol") or "").lower()
    if protocol in ("-1", "all"):
        return True
    low, high = rule.get("fromPort"), rule.get("toPort")
    return protocol in ("tcp", "6") and low is not None and low <= SSH_PORT <= (high or low)


def _azure_rule_opens_ssh_to_anywhere(rule: Any) -> bool:
    if str(rule.get("direction", "")).lower() != "inbound":
        return False
    if str(rule.get("access", "")).lower() != "allow":
        return False
    if str(rule.get("protocol", "*")).lower() not in ("*", "tcp"):
        return False
    sources = [rule.get("sourceAddressPrefix"), *(rule.get("sourceAddressPrefixes") or [])]
    if not any(_is_broad(str(s)) for s in sources if s):
        return False
    ports = [rule.get("destinationPortRange"), *(rule.get("destinationPortRanges") or [])]
    return any(_port_range_covers(str(p), SSH_PORT) for p in ports if p)


def _port_range_covers(port_range: str, port: int) -> bool:
    if port_range == "*":
        return True
    low, _, high = port_range.partition("-")
    return int(low) <= port <= int(high or low)


def storage_never_public(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Buckets, blob accounts and containers admit no anonymous reader."""
    props, kind = args.props, args.resource_type
    if kind in (*AWS_BUCKETS, *AWS_BUCKET_ACLS) and props.get("acl") in PUBLIC_S3_ACLS:
        report(f"S3 ACL {props.get('acl')!r} makes objects public; drop the ACL")
    elif kind == AZURE_STORAGE_ACCOUNT and props.get("allowBlobPublicAccess") is not False:
        report("storage account must set allowBlobPublicAccess: false (no anonymous blob reads)")
    elif kind == AZURE_CONTAINER and str(props.get("publicAccess") or "None") != "None":
        report(f"blob container publicAccess is {props.get('publicAccess')!r}; use None")


def ec2_imdsv2_required(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Instance metadata only with a session token (IMDSv2): SSRF cannot reach the role."""
    if args.resource_type == AWS_INSTANCE or args.resource_type == AWS_LAUNCH_TEMPLATE:
        tokens = _get(args.props, "metadataOptions", "httpTokens")
    else:
        return
    if tokens != "required":
        report(f"metadataOptions.httpTokens is {tokens!r}; set 'required' (IMDSv2 only)")


def azure_password_auth_off(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Azure VMs accept SSH keys only."""
    if args.resource_type != AZURE_VM:
        return
    os_profile = args.props.get("osProfile") or {}
    if os_profile.get("adminPassword"):
        report("the VM sets adminPassword; key-only SSH means no password at all")
    if _get(os_profile, "linuxConfiguration", "disablePasswordAuthentication") is not True:
        report("osProfile.linuxConfiguration.disablePasswordAuthentication must be true")


# --- mandatory, across the stack -------------------------------------------------------


def gpu_box_has_daily_stop(args: StackValidationArgs, report: ReportViolation) -> None:
    """Every GPU box is stopped (AWS) or deallocated (Azure) by a daily schedule."""
    for box in _gpu_boxes(args.resources):
        if box.resource_type in AWS_BOX_TYPES:
            kind, covers = AWS_SCHEDULE, _aws_stop_covers
        else:
            kind, covers = AZURE_SCHEDULE, _azure_stop_covers
        schedules = _of_type(args.resources, kind)
        for name in _unstopped(box, schedules, covers):
            report(f"{name} has no enabled daily stop schedule (autoShutdownTime)", box.urn)


def _unstopped(box: PolicyResource, schedules: list[PolicyResource], covers: Callable) -> list:
    """The names of the box's instances no schedule stops: each of an Ec2Boxes' own."""
    ids = _known(lambda: box.props.get("instanceIds")) if box.resource_type == AWS_BOXES else None
    if not ids:
        return [] if any(covers(s, box) for s in schedules) else [box.name]
    return [
        f"{box.name} box {rank} ({instance})"
        for rank, instance in enumerate(ids)
        if not any(covers(s, box, instance) for s in schedules)
    ]


def _aws_stop_covers(schedule: PolicyResource, box: PolicyResource, instance: str = "") -> bool:
    props = schedule.props
    if str(props.get("state") or "ENABLED") != "ENABLED":
        return False
    if _get(props, "target", "arn") != STOP_INSTANCES_TARGET:
        return False
    text = _known(lambda: _get(props, "target", "input"))
    instance_ids = None if text is None else json.loads(text).get("InstanceIds", [])
    if instance and instance_ids is not None:
        return instance in instance_ids
    return _references(schedule, box, "target", instance_ids)


def _azure_stop_covers(schedule: PolicyResource, box: PolicyResource) -> bool:
    props = schedule.props
    if props.get("status") != "Enabled" or props.get("taskType") != "ComputeVmShutdownTask":
        return False
    # DevTestLab wants "HHmm" and a Windows time-zone id; "21:30" or an IANA name is
    # refused by Azure at deploy time, after the VM is already up and billing.
    # None: not known yet in a preview; "": not set at all.
    time = _known(lambda: str(_get(props, "dailyRecurrence", "time") or ""))
    zone = _known(lambda: str(props.get("timeZoneId") or ""))
    if time is not None and not AZURE_HHMM.fullmatch(time):
        return False
    if zone is not None and (not zone or "/" in zone):
        return False
    return _references(schedule, box, "targetResourceId", _value(schedule, "targetResourceId"))


def gpu_box_under_budget(args: StackValidationArgs, report: ReportViolation) -> None:
    """Every GPU box falls inside a cost budget that e-mails someone."""
    for box in _gpu_boxes(args.resources):
        if box.resource_type in AWS_BOX_TYPES:
            budgets = _of_type(args.resources, AWS_BUDGET)
            tags = _aws_box_tags(box, args.resources)
            covered = any(_aws_budget_covers(budget, tags) for budget in budgets)
        else:
            budgets = _of_type(args.resources, AZURE_BUDGET)
            covered = any(_azure_budget_covers(b, box, args.resources) for b in budgets)
        if not covered:
            report(f"{box.name} is under no budget with e-mail alerts (budgetAmount)", box.urn)


def _aws_box_tags(box: PolicyResource, resources: list[PolicyResource]) -> dict:
    """The tags an instance gets: its own, or its launch template's for the instances."""
    if box.resource_type == AWS_INSTANCE:
        return _known(lambda: box.props.get("tags")) or {}
    for template in _of_type(resources, AWS_LAUNCH_TEMPLATE):
        if _references(box, template, "launchTemplateId", _value(box, "launchTemplateId")):
            specs = _known(lambda t=template: t.props.get("tagSpecifications")) or []
            for spec in specs:
                if spec.get("resourceType") == "instance":
                    return _known(lambda spec=spec: spec.get("tags")) or {}
    return {}


def _aws_budget_covers(budget: PolicyResource, tags: dict) -> bool:
    props = budget.props
    if props.get("budgetType") != "COST" or not props.get("notifications"):
        return False
    if not any(n.get("subscriberEmailAddresses") for n in props["notifications"]):
        return False
    tag_values = [
        value
        for cost_filter in props.get("costFilters") or []
        if cost_filter.get("name") == "TagKeyValue"
        for value in cost_filter.get("values") or []
    ]
    if not props.get("costFilters"):
        return True  # the whole account
    return any(f"user:{key}${value}" in tag_values for key, value in tags.items())


def _azure_budget_covers(
    budget: PolicyResource, box: PolicyResource, resources: list[PolicyResource]
) -> bool:
    props = budget.props
    notifications = props.get("notifications") or {}
    if not any(n.get("enabled") and n.get("contactEmails") for n in notifications.values()):
        return False
    scope = _value(budget, "scope")
    if scope and re.fullmatch(r"/subscriptions/[^/]+/?", str(scope[0])):
        return True  # the whole subscription
    box_group = _value(box, "resourceGroupName")
    return any(
        _references(box, group, "resourceGroupName", box_group, key="name")
        and _references(budget, group, "scope", scope)
        for group in _of_type(resources, AZURE_RESOURCE_GROUP)
    )


def s3_public_access_blocked(args: StackValidationArgs, report: ReportViolation) -> None:
    """Every S3 bucket has a public-access block with all four switches on."""
    blocks = [
        b for b in _of_type(args.resources, AWS_PUBLIC_ACCESS_BLOCK)
        if all(b.props.get(flag) is True for flag in PUBLIC_ACCESS_FLAGS)
    ]  # fmt: skip
    for bucket in (r for r in args.resources if r.resource_type in AWS_BUCKETS):
        # A block names its bucket by id, which for S3 is the bucket's name.
        if not any(_references(b, bucket, "bucket", _value(b, "bucket")) for b in blocks):
            report(f"bucket {bucket.name} lacks a full public-access block", bucket.urn)


# --- advisory --------------------------------------------------------------------------


def gpu_box_on_demand(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """A GPU box on on-demand capacity costs ~3x spot; the trainer resumes after eviction."""
    if not is_gpu_box(args.resource_type, args.props):
        return
    props = args.props
    if args.resource_type == AWS_INSTANCE:
        spot = _get(props, "instanceMarketOptions", "marketType") == "spot"
    elif args.resource_type == AWS_BOXES:  # spot first: the candidates' first market
        spot = _get((_known(lambda: props.get("candidates")) or [{}])[0], "market") == "spot"
    else:
        spot = props.get("priority") == "Spot"
    if not spot:
        report("on-demand GPU capacity; `spot: true` costs far less and the trainer resumes")


def storage_deleted_on_destroy(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Say out loud when `pulumi destroy` will delete the checkpoints with the bucket."""
    if args.resource_type not in (*AWS_BUCKETS, AZURE_STORAGE_ACCOUNT):
        return
    tags = args.props.get("tags") or {}
    if KEEP_TAG in tags:
        doomed = tags[KEEP_TAG] == "false"
    elif args.resource_type in AWS_BUCKETS:
        doomed = args.props.get("forceDestroy") is True
    else:
        return  # an untagged Azure account: nothing in its properties tells
    if doomed:
        report(
            "`pulumi destroy` deletes this storage and every checkpoint in it; run "
            "`fab download` first, or set glucose-training:keepStorageOnDestroy true"
        )


def _gpu_boxes(resources: list[PolicyResource]) -> list[PolicyResource]:
    return [r for r in resources if is_gpu_box(r.resource_type, r.props)]


def _of_type(resources: list[PolicyResource], resource_type: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type == resource_type]


def _policy(kind: type, name: str, rule: Callable, level: EnforcementLevel) -> Any:
    # The rule's first docstring line is the description `pulumi preview` prints.
    return kind(name, rule.__doc__.splitlines()[0], rule, level)


MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY
RESOURCE = ResourceValidationPolicy
STACK = StackValidationPolicy

POLICIES = [
    _policy(STACK, "gpu-box-daily-stop", gpu_box_has_daily_stop, MANDATORY),
    _policy(STACK, "gpu-box-under-budget", gpu_box_under_budget, MANDATORY),
    _policy(RESOURCE, "no-ssh-from-anywhere", no_ssh_from_anywhere, MANDATORY),
    _policy(RESOURCE, "storage-never-public", storage_never_public, MANDATORY),
    _policy(STACK, "s3-public-access-blocked", s3_public_access_blocked, MANDATORY),
    _policy(RESOURCE, "ec2-imdsv2-required", ec2_imdsv2_required, MANDATORY),
    _policy(RESOURCE, "azure-vm-password-auth-off", azure_password_auth_off, MANDATORY),
    _policy(RESOURCE, "gpu-box-on-demand", gpu_box_on_demand, ADVISORY),
    _policy(RESOURCE, "storage-deleted-on-destroy", storage_deleted_on_destroy, ADVISORY),
]
