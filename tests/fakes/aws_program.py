"""Run the real program for an AWS stack under Pulumi's mocks, with what AWS would compute.

The provider computes ARNs, addresses and URLs and answers the AMI, zone and account
look-ups; these hooks give plausible values so the program's wiring (which ARN lands
in which policy, which id in which schedule) is visible to the tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from tests.fakes.pulumi_mocks import Recorder, RunResult, main_program, run_program

STACK = "test"
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
AMI_ID = "ami-0abc1234def567890"
NEWER_AMI_ID = "ami-0fff5678abc123456"  # what a lookup a week later finds
AMI_ROOT_GB = 75  # the looked-up AMI's root snapshot
GPU_QUOTA_VCPUS = 64.0
ZONES = ["us-east-1d", "us-east-1a", "us-east-1c"]  # unsorted, as AWS returns them
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk0cGxhY2Vob2xkZXJrZXlmb3J0ZXN0cw== me@laptop"

GOOD_CONFIG: dict[str, Any] = {
    "cloud": "aws",
    "vmSize": "g5.xlarge",
    "sshPublicKey": SSH_KEY,
    "sshAllowedCidr": "198.18.0.7/32",
    "budgetAmount": "150",
    "alertEmails": '["me@lab.dev", "lab@lab.dev"]',
    "autoShutdownTime": "21:30",
    "autoShutdownTimeZone": "Europe/Berlin",
    "idleShutdownMinutes": "45",
    "osDiskSizeGb": "200",
    "owner": "alice",
}


# EC2 ids: a prefix and 17 hex digits (https://docs.aws.amazon.com/AWSEC2/latest/
# APIReference/API_Instance.html); the other resources here are known by their names.
EC2_ID_PREFIXES = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
}
AUTONAME_SUFFIX = "-0a1b2c3"  # pulumi-aws: the logical name, "-" and 7 random hex digits


def aws_id(args: pulumi_mocks.MockResourceArgs) -> str:
    """The id AWS would give the resource (what `cloud_ids` recorders return)."""
    prefix = EC2_ID_PREFIXES.get(args.typ)
    if prefix:
        return prefix + hashlib.sha256(args.name.encode()).hexdigest()[:17]
    if args.typ == "aws:s3/bucket:Bucket":
        return f"{args.name}{AUTONAME_SUFFIX}"
    return args.name


def _arn(service: str, resource: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT_ID}:{resource}"


def _computed_outputs(cloud_ids: bool) -> dict[str, Any]:
    def eip(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
        return {"publicIp": f"198.51.100.{int(args.name.rsplit('-', 1)[1]) + 10}"}

    def boxes(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
        """What the provider's create answers when EC2 takes the first candidate."""
        inputs = args.inputs
        first = inputs["candidates"][0]
        zones = sorted(inputs["subnets"])
        count = int(inputs["count"])
        ids = [
            "i-" + hashlib.sha256(f"{args.name}-{n}".encode()).hexdigest()[:17]
            if cloud_ids
            else f"i-{args.name}-{n}"
            for n in range(count)
        ]
        subnet = 16 + ord(first["zone"][-1]) - ord("a") if first["zone"] in zones else 0
        tried = [{**c, "refusal": "not tried: an earlier candidate was taken"} for c in
                 inputs["candidates"][1:]]  # fmt: skip
        return {
            "instanceIds": ids,
            "privateIps": [f"10.42.{subnet}.{n + 4}" for n in range(count)],
            "imageId": AMI_ID,
            "spotRequestIds": [f"sir-{i[-8:]}" if first["market"] == "spot" else "" for i in ids],
            "placement": first,
            "placementTried": [{**first, "refusal": ""}, *tried, *inputs["dropped"]],
        }

    return {
        "pulumi-python:dynamic/glucose-training:Ec2Boxes": boxes,
        "aws:ec2/launchTemplate:LaunchTemplate": lambda a: {"latestVersion": 1},
        "aws:ec2/eip:Eip": eip,
        "aws:s3/bucket:Bucket": lambda a: {
            "bucket": f"{a.name}{AUTONAME_SUFFIX}",
            "arn": f"arn:aws:s3:::{a.name}{AUTONAME_SUFFIX}",
        },
        "aws:ecr/repository:Repository": lambda a: {
            "arn": _arn("ecr", f"repository/{a.name}"),
            "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/{a.name}",
        },
        "aws:iam/role:Role": lambda a: {"arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{a.name}"},
        "aws:ec2/keyPair:KeyPair": lambda a: {"keyName": a.name},
        "aws:sns/topic:Topic": lambda a: {"arn": _arn("sns", a.name)},
    }


def offerings_in(zones: list[str], sold: dict[str, list[str]] | None = None):
    """EC2's instance type offerings by zone: every size asked for in every one of
    `zones`, unless `sold` (size -> zones) says otherwise."""

    def answer(args: pulumi_mocks.MockCallArgs) -> dict[str, Any]:
        asked = args.args["filters"][0]["values"]
        # The zones of the stack's own region (the provider's aws:region).
        region = pulumi.Config("aws").get("region") or REGION
        pairs = [
            (t, region + z.removeprefix(REGION)) for t in asked for z in (sold or {}).get(t, zones)
        ]
        return {
            "id": REGION,
            "locations": [z for _, z in pairs],
            "locationTypes": ["availability-zone"] * len(pairs),
            "instanceTypes": [t for t, _ in pairs],
        }

    return answer


def _invokes(ami_id: str, known_tags: list[str]) -> dict[str, Any]:
    return {
        "aws:ec2/getAmi:getAmi": lambda a: {
            "id": ami_id,
            "imageId": ami_id,
            "name": "dlami",
            "rootDeviceName": "/dev/sda1",
            "blockDeviceMappings": [
                {"deviceName": "/dev/sda1", "ebs": {"volume_size": str(AMI_ROOT_GB)}},
                {"deviceName": "/dev/sdb", "ebs": {}, "virtualName": "ephemeral0"},
            ],
        },
        "aws:servicequotas/getServiceQuota:getServiceQuota": lambda a: {
            "id": a.args["quotaCode"],
            "quotaCode": a.args["quotaCode"],
            "serviceCode": "ec2",
            "value": GPU_QUOTA_VCPUS,
        },
        "aws:costexplorer/getTags:getTags": lambda a: {"id": "tags", "tags": list(known_tags)},
        "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": offerings_in(ZONES),
        "aws:index/getCallerIdentity:getCallerIdentity": lambda a: {
            "id": ACCOUNT_ID,
            "accountId": ACCOUNT_ID,
            "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/me",
            "userId": "AIDAEXAMPLE",
        },
    }


def aws_recorder(
    ami_id: str = AMI_ID, *, cloud_ids: bool = False, known_tags: tuple[str, ...] = ()
) -> Recorder:
    """Mocks answering as AWS would; `ami_id` is what the AMI look-up finds today,
    `known_tags` what Cost Explorer lists (by default none: Billing has not seen the
    cost-scope tag yet, as on a new account's first day); `cloud_ids` gives ids in
    AWS's own formats instead of `<type>/<name>`."""
    return Recorder(
        outputs=_computed_outputs(cloud_ids),
        calls=_invokes(ami_id, list(known_tags)),
        ids=aws_id if cloud_ids else None,
    )


def stack_settings(**overrides: Any) -> dict[str, str]:
    """The engine's view of a stack file: GOOD_CONFIG with camelCase overrides (None drops)."""
    raw = {**GOOD_CONFIG, **overrides}
    settings = {f"glucose-training:{k}": v for k, v in raw.items() if v is not None}
    settings["aws:region"] = REGION
    return settings


def run_stack(
    recorder: Recorder | None = None, *, transformation: Callable | None = None, **overrides: Any
) -> RunResult:
    """Run the real program (pulumi/__main__.py) for an AWS stack; exceptions propagate."""
    return run_program(
        main_program(transformation),
        recorder or aws_recorder(),
        stack_settings(**overrides),
        stack=STACK,
    )
