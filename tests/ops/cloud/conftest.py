"""The clouds `fab` asks with the user's credentials: moto's EC2 and Scheduler, and the
local fake of ARM with a logged-in Azure CLI on PATH."""

from __future__ import annotations

import os

import pytest

from tests.fakes.arm import SUBSCRIPTION, ArmState, FakeArm

GROUP = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/glucose-rg"
VM = GROUP + "/providers/Microsoft.Compute/virtualMachines/glucose-{}-vm"
FAKE_AZ = """#!/bin/sh
echo '{"accessToken": "deployer-token", "expiresOn": "2099-01-01 00:00:00.000000",
 "expires_on": 4070908800, "tokenType": "Bearer"}'
"""


def target_outputs(cloud: str, box_ids: list[str], **more) -> dict:
    return {
        "cloud": cloud,
        "hosts": ["127.0.0.1"],
        "privateHosts": [f"10.42.0.{4 + n}" for n in range(len(box_ids))],
        "boxIds": box_ids,
        "region": "us-east-1" if cloud == "aws" else "eastus",
        "sshUser": "ubuntu",
        "storageUri": "s3://bucket",
        **more,
    }


@pytest.fixture
def ec2(empty_aws_account):
    import boto3

    return boto3.client("ec2", region_name="us-east-1")


def instances(ec2, count: int) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    found = ec2.run_instances(
        ImageId=image, InstanceType="g5.xlarge", MinCount=count, MaxCount=count
    )
    return [instance["InstanceId"] for instance in found["Instances"]]


@pytest.fixture
def azure(tmp_path, monkeypatch):
    """The fake ARM, and a logged-in Azure CLI on PATH."""
    az = tmp_path / "bin" / "az"
    az.parent.mkdir()
    az.write_text(FAKE_AZ)
    az.chmod(0o755)
    monkeypatch.setenv("PATH", f"{az.parent}{os.pathsep}{os.environ['PATH']}")
    arm = FakeArm(
        ArmState(vms={VM.format(0): "PowerState/running", VM.format(1): "PowerState/deallocated"})
    )
    monkeypatch.setenv("GLUCOSE_ARM_ENDPOINT", arm.endpoint)
    yield arm
    arm.close()
