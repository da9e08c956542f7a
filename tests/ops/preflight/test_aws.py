"""`fab preflight` for an AWS stack, against moto (EC2, STS, Budgets) and a local fake of
Service Quotas, Cost Explorer's tag list and IAM's policy simulator. No real cloud."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ops.preflight import aws as preflight_aws
from ops.preflight import checks as preflight
from ops.preflight.findings import Findings
from tests.fakes.aws_control import FakeAwsControl
from tests.ops.conftest import FAB
from tests.paths import REPO

pytestmark = pytest.mark.e2e  # moto
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1Y29zZS10cmFpbmluZy10ZXN0LWtleQ me@laptop"
STACK = {
    "aws:region": "us-east-1",
    "glucose-training:cloud": "aws",
    "glucose-training:vmSize": "g5.xlarge",
    "glucose-training:nodeCount": 2,
    "glucose-training:sshPublicKey": KEY,
    "glucose-training:sshAllowedCidr": "198.18.0.7/32",
    "glucose-training:budgetAmount": 200,
    "glucose-training:alertEmails": ["me@lab.dev"],
}


@pytest.fixture
def control(empty_aws_account, monkeypatch):
    fake = FakeAwsControl()
    for name, value in fake.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    yield fake
    fake.close()


@pytest.fixture
def ec2(empty_aws_account):
    import boto3

    return boto3.client("ec2", region_name="us-east-1")


def stack_file(tmp_path: Path, **changes) -> Path:
    config = {**STACK, **{f"glucose-training:{k}": v for k, v in changes.items()}}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def check(tmp_path: Path, **changes) -> Findings:
    return preflight.run(preflight.settings_from_file(stack_file(tmp_path, **changes)))


def test_a_healthy_account_has_no_problems_and_says_who_it_checked(control, tmp_path):
    findings = check(tmp_path)
    assert findings.problems == []
    assert any("account 123456789012" in note for note in findings.notes)


def test_a_new_account_without_gpu_quota_gets_the_request_command(control, tmp_path):
    control.state.quotas["L-DB2E81BA"] = 0
    (problem,) = check(tmp_path).problems
    assert "'Running On-Demand G and VT instances' (L-DB2E81BA) is 0 vCPUs" in problem
    assert "--quota-code L-DB2E81BA --desired-value 8 --region us-east-1" in problem


def test_spot_boxes_are_checked_against_the_spot_quota_default(control, tmp_path):
    control.state.default_quotas["L-3819A6DF"] = 4  # never raised: AWS's default applies
    (problem,) = check(tmp_path, spot=True).problems
    assert "All G and VT Spot Instance Requests" in problem and "is 4 vCPUs" in problem


def test_gpu_boxes_already_running_elsewhere_count_against_the_quota(control, ec2, tmp_path):
    control.state.quotas["L-DB2E81BA"] = 12
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=2, MaxCount=2)
    (problem,) = check(tmp_path).problems
    assert "is 12 vCPUs with 8 in use" in problem and "--desired-value 16" in problem


def test_this_stacks_own_boxes_do_not_count_against_it(control, ec2, tmp_path):
    control.state.quotas["L-DB2E81BA"] = 8
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=2,
        MaxCount=2,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [{"Key": "cost-scope", "Value": "glucose-training/dev"}],
            }
        ],
    )
    assert check(tmp_path).problems == []


def test_a_stack_of_two_boxes_needs_one_elastic_ip_box_0s(control, ec2, tmp_path):
    for _ in range(4):
        ec2.allocate_address(Domain="vpc")
    assert check(tmp_path).problems == []
    ec2.allocate_address(Domain="vpc")
    (problem,) = check(tmp_path).problems
    assert "'EC2-VPC Elastic IPs' (L-0263D0A3) is 5 addresses with 5 in use" in problem
    assert "needs 1 more" in problem


def test_missing_rights_are_named_with_the_fix(control, tmp_path):
    control.state.denied_actions = {"iam:PassRole", "budgets:CreateBudgetAction"}
    (problem,) = check(tmp_path).problems
    assert "may not iam:PassRole, budgets:CreateBudgetAction;" in problem
    assert "attach a policy" in problem


def test_a_linked_account_is_told_to_leave_the_tag_to_the_payer(control, tmp_path):
    control.state.cost_tags_denied = True
    (problem,) = check(tmp_path).problems
    assert "cannot activate cost-allocation tags" in problem
    assert "activateCostAllocationTag false" in problem
    assert check(tmp_path, activateCostAllocationTag=False).problems == []


def test_a_tag_billing_has_not_seen_yet_is_a_note_not_a_problem(control, tmp_path):
    control.state.cost_tags = {}
    findings = check(tmp_path)
    assert findings.problems == []
    assert any("not yet known to Billing" in note for note in findings.notes)


def test_a_pinned_ami_that_does_not_exist_is_a_problem(control, tmp_path):
    (problem,) = check(tmp_path, amiId="ami-0123456789abcdef0").problems
    assert "amiId ami-0123456789abcdef0 does not exist" in problem


def test_a_region_without_the_size_is_a_problem(control):
    import boto3

    config = SimpleNamespace(region="af-south-1", vm_size="g5.xlarge")
    findings = Findings()
    ec2 = boto3.client("ec2", region_name="af-south-1")
    preflight_aws._size_offered(findings, config, None, ec2)
    (problem,) = findings.problems
    assert "no availability zone of af-south-1 sells g5.xlarge" in problem


def test_bad_config_is_reported_before_any_cloud_call(control, tmp_path):
    problems = check(tmp_path, sshAllowedCidr="0.0.0.0/1", budgetAmount="inf").problems
    assert len(problems) == 2 and all(p.startswith("stack config: ") for p in problems)
    assert control.state.targets == []


def test_no_credentials_is_one_problem_saying_how_to_log_in(control, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    (problem,) = check(tmp_path).problems
    assert "AWS credentials do not work" in problem and "aws sso login" in problem


def test_fab_preflight_lists_every_problem_and_fails(control, ec2, tmp_path):
    control.state.quotas["L-DB2E81BA"] = 0
    for _ in range(5):
        ec2.allocate_address(Domain="vpc")
    result = subprocess.run(
        [str(FAB), "preflight", "--config-file", str(stack_file(tmp_path))],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "  1. quota 'Running On-Demand G and VT instances'" in result.stderr
    assert "  2. quota 'EC2-VPC Elastic IPs'" in result.stderr
    assert "2 problem(s): `pulumi up` of stack dev would fail" in result.stderr
    assert "Traceback" not in result.stderr
