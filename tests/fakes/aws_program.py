"""Run the real program for an AWS stack under Pulumi's mocks, with what AWS would compute.

The provider computes ARNs, addresses and URLs and answers the AMI, zone and account
look-ups; these hooks give plausible values so the program's wiring (which ARN lands
in which policy, which id in which schedule) is visible to the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi.runtime import mocks as pulumi_mocks

from tests.fakes.pulumi_mocks import Recorder, RunResult, main_program, run_program

STACK = "test"
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
AMI_ID = "ami-0abc1234def567890"
NEWER_AMI_ID = "ami-0fff5678abc123456"  # what a lookup a week later finds
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


def _arn(service: str, resource: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT_ID}:{resource}"


def _computed_outputs() -> dict[str, Any]:
    def eip(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
        return {"publicIp": f"198.51.100.{int(args.name.rsplit('-', 1)[1]) + 10}"}

    def instance(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
        index = int(args.name.rsplit("-", 1)[1])
        outputs = {
            "arn": _arn("ec2", f"instance/i-{args.name}"),
            "privateIp": f"10.42.0.{index + 4}",
        }
        if args.inputs.get("instanceMarketOptions"):
            outputs["spotInstanceRequestId"] = f"sir-{args.name}"
        return outputs

    return {
        "aws:ec2/instance:Instance": instance,
        "aws:ec2/eip:Eip": eip,
        "aws:s3/bucket:Bucket": lambda a: {
            "bucket": f"{a.name}-0a1b2c3",
            "arn": f"arn:aws:s3:::{a.name}-0a1b2c3",
        },
        "aws:ecr/repository:Repository": lambda a: {
            "arn": _arn("ecr", f"repository/{a.name}"),
            "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/{a.name}",
        },
        "aws:iam/role:Role": lambda a: {"arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{a.name}"},
        "aws:ec2/keyPair:KeyPair": lambda a: {"keyName": a.name},
    }


def _invokes(ami_id: str = AMI_ID) -> dict[str, Any]:
    return {
        "aws:ec2/getAmi:getAmi": lambda a: {"id": ami_id, "imageId": ami_id, "name": "dlami"},
        "aws:servicequotas/getServiceQuota:getServiceQuota": lambda a: {
            "id": a.args["quotaCode"],
            "quotaCode": a.args["quotaCode"],
            "serviceCode": "ec2",
            "value": GPU_QUOTA_VCPUS,
        },
        # Billing has not seen the cost-scope tag yet (a new account's first day).
        "aws:costexplorer/getTags:getTags": lambda a: {"id": "tags", "tags": []},
        "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": lambda a: {
            "id": REGION,
            "locations": list(ZONES),
            "locationTypes": ["availability-zone"] * len(ZONES),
            "instanceTypes": [a.args["filters"][0]["values"][0]] * len(ZONES),
        },
        "aws:index/getCallerIdentity:getCallerIdentity": lambda a: {
            "id": ACCOUNT_ID,
            "accountId": ACCOUNT_ID,
            "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/me",
            "userId": "AIDAEXAMPLE",
        },
    }


def aws_recorder(ami_id: str = AMI_ID) -> Recorder:
    """Mocks answering as AWS would; `ami_id` is what the AMI look-up finds today."""
    return Recorder(outputs=_computed_outputs(), calls=_invokes(ami_id))


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
