"""The reference checks can fail: planted wrong values, unmapped types and inputs, and the
four defects of issue 22 put back into the real program, each must turn them red.

A planted value is a copy of what the program declared, changed in one place; each
case names the line the checker must say (resource, input and reference).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
from tzlocal.windows_tz import tz_win

from stack import cloud_limits
from tests.fakes.pulumi_mocks import Recorded, RunResult
from tests.pulumi.references import arm_urls, checks, iam
from tests.pulumi.references.matrix import Stack

AWS_STACK = Stack("aws", spot=True, nodes=2, zone="America/Vancouver")
AZURE_STACK = Stack("azure", spot=True, nodes=2, zone="America/Vancouver")


def _planted(stack: Stack, type_: str, change: Callable[[Recorded], None]) -> list[str]:
    result = copy.deepcopy(stack.run())
    change(next(r for r in result.resources if r.type == type_))
    return checks.declared_problems(stack.id, stack.region, result) + checks.unmapped(result)


def _set(path: str, value: object) -> Callable[[Recorded], None]:
    """Set inputs at `path` (dotted; a number indexes a list, `*` every value of a map)."""

    def change(resource: Recorded) -> None:
        *parents, last = path.split(".")
        targets = [resource.inputs]
        for part in parents:
            targets = (
                [t[int(part)] if part.isdigit() else t[part] for t in targets]
                if part != "*"
                else [v for t in targets for v in t.values()]
            )
        for target in targets:
            target[last] = value

    return change


def _drop(key: str) -> Callable[[Recorded], None]:
    return lambda resource: resource.inputs.pop(key)


def _rename(name: str) -> Callable[[Recorded], None]:
    return lambda resource: setattr(resource, "name", name)


def _emails(count: int) -> list[str]:
    return [f"a{n}@lab.dev" for n in range(count)]


SG, BUDGET = "aws:ec2/securityGroup:SecurityGroup", "aws:budgets/budget:Budget"
ACTION, TEMPLATE = "aws:budgets/budgetAction:BudgetAction", "aws:ec2/launchTemplate:LaunchTemplate"
BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
VM, ROLE_POLICY = "azure-native:compute:VirtualMachine", "aws:iam/rolePolicy:RolePolicy"
AZ_BUDGET = "azure-native:consumption:Budget"
WORKFLOW = "azure-native:logic:Workflow"

# (stack, type, change, what the checker must say)
PLANTED = {
    "an apostrophe in a group description": (
        AWS_STACK,
        SG,
        _set("description", "the stack's boxes"),
        "botocore ec2 CreateSecurityGroup Description",
    ),
    "an & in a rule description, which a group pair takes not": (
        AWS_STACK,
        SG,
        _set("ingress.0.description", "SSH & more"),
        "IpPermissions[].UserIdGroupPairs[].Description",
    ),
    "12 subscribers on a budget notification": (
        AWS_STACK,
        BUDGET,
        _set("notifications.0.subscriberEmailAddresses", _emails(12)),
        "12 items, more than 11 (botocore budgets CreateNotification Subscribers)",
    ),
    "12 subscribers on the budget action": (
        AWS_STACK,
        ACTION,
        _set("subscribers", [{"address": a, "subscriptionType": "EMAIL"} for a in _emails(12)]),
        "12 items, more than 11 (botocore budgets CreateBudgetAction Subscribers)",
    ),
    "a size the region does not sell": (
        Stack("aws", location="eu-west-1"),
        BOXES,
        _set("candidates.0.size", "g6.xlarge"),
        "'g6.xlarge' is not sold in eu-west-1",
    ),
    "an enum typo": (
        AWS_STACK,
        TEMPLATE,
        _set("metadataOptions.httpTokens", "require"),
        "'require' is not one of ['optional', 'required']",
    ),
    "a zone of another region": (
        AWS_STACK,
        BOXES,
        _set("candidates.0.zone", "eu-west-1a"),
        "'eu-west-1a' is not an availability zone of us-east-1",
    ),
    "a subnet in a zone of another region": (
        AWS_STACK,
        BOXES,
        _set("subnets", {"eu-west-1a": "subnet-0abc1234def567890"}),
        "subnets key: 'eu-west-1a' is not an availability zone of us-east-1",
    ),
    "a market EC2 Fleet does not know": (
        AWS_STACK,
        BOXES,
        _set("candidates.0.market", "ondemand"),
        "'ondemand' is not one of",
    ),
    "a launch template flag as a word": (
        AWS_STACK,
        TEMPLATE,
        _set("blockDeviceMappings.0.ebs.encrypted", "yes"),
        "'yes' is not 'true' or 'false'",
    ),
    "a generated name longer than the API takes": (
        AWS_STACK,
        "aws:scheduler/schedule:Schedule",
        _rename("glucose-" + "d" * 60),
        "is longer than 64 characters (botocore scheduler CreateSchedule Name)",
    ),
    "a required member left out": (
        AWS_STACK,
        BUDGET,
        _drop("timeUnit"),
        "missing, required by botocore budgets CreateBudget",
    ),
    "a string where the API takes a number": (
        AWS_STACK,
        "aws:cloudwatch/metricAlarm:MetricAlarm",
        _set("evaluationPeriods", "45"),
        "'45' is a str, expected integer",
    ),
    "a tag value outside IAM's character set": (
        AWS_STACK,
        "aws:iam/role:Role",
        _set("tags.owner", "<script>"),
        "botocore iam CreateRole Tags[].Value",
    ),
    "a region SSM does not know": (
        AWS_STACK,
        ACTION,
        _set("definition.ssmActionDefinition.region", "us-east-9"),
        "'us-east-9' is not an ssm region",
    ),
    "a managed policy that does not exist": (
        AWS_STACK,
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        _set("policyArn", "arn:aws:iam::aws:policy/AWSBudgetsActionsRolePolicy"),
        "is not an AWS-managed policy",
    ),
    "an action IAM does not know": (
        AWS_STACK,
        ROLE_POLICY,
        lambda r: r.inputs.update(
            policy=r.inputs["policy"].replace("s3:GetObject", "s3:GetObjects")
        ),
        "unknown action 's3:GetObjects'",
    ),
    "a bucket ARN for an object action": (
        AWS_STACK,
        ROLE_POLICY,
        lambda r: r.inputs.update(policy=r.inputs["policy"].replace("/*", "")),
        "s3:GetObject takes no resource like",
    ),
    "a zone name the tz database does not have": (
        AWS_STACK,
        "aws:scheduler/schedule:Schedule",
        _set("scheduleExpressionTimezone", "posix/Europe/Berlin"),
        "is not a tz database zone",
    ),
    "a bucket name CloudFormation's pattern refuses": (
        AWS_STACK,
        "aws:s3/bucket:Bucket",
        _rename("Glucose_Storage"),
        "CloudFormation AWS::S3::Bucket BucketName",
    ),
    "an Azure enum typo": (
        AZURE_STACK,
        VM,
        _set("priority", "Spott"),
        "'Spott' is not one of ['Low', 'Regular', 'Spot']",
    ),
    "a property the model does not have": (
        AZURE_STACK,
        VM,
        _set("evictionPolicyy", "Deallocate"),
        "VirtualMachine has no such property",
    ),
    "a read-only property": (
        AZURE_STACK,
        VM,
        _set("vmId", "x"),
        "vmId: read-only in VirtualMachine",
    ),
    "a required property left out": (
        AZURE_STACK,
        VM,
        _drop("location"),
        "location: missing, required by VirtualMachine",
    ),
    "a short name longer than 12": (
        AZURE_STACK,
        "azure-native:monitor:ActionGroup",
        _set("groupShortName", "glucose-stop!"),
        "is longer than 12 characters",
    ),
    "a TypeSpec enum typo": (
        AZURE_STACK,
        AZ_BUDGET,
        _set("notifications.*.thresholdType", "Actuals"),
        "'Actuals' is not one of ['Actual', 'Forecasted']",
    ),
    "51 budget contact e-mails": (
        AZURE_STACK,
        AZ_BUDGET,
        _set("notifications.*.contactEmails", _emails(51)),
        "51 items, more than 50",
    ),
    "an NSG priority above 4096": (
        AZURE_STACK,
        "azure-native:network:NetworkSecurityGroup",
        _set("securityRules.0.priority", 5000),
        "5000 is above the maximum 4096",
    ),
    "a tag value longer than 256": (
        AZURE_STACK,
        VM,
        _set("tags.owner", "x" * 257),
        "tags.*: 'xxxxxxxx",
    ),
    "a storage account name with capitals": (
        AZURE_STACK,
        "azure-native:storage:StorageAccount",
        _rename("GlucoseData"),
        "accountName: 'GlucoseDataa1b2c3d4' does not match '^[a-z0-9]+$'",
    ),
    "a URL part the API fixes": (
        AZURE_STACK,
        "azure-native:storage:BlobServiceProperties",
        _set("blobServicesName", "primary"),
        "'primary', the URL takes 'default'",
    ),
    "a blob key ending in a slash": (
        AZURE_STACK,
        "pulumi-python:dynamic/glucose-training:BoxProgramsBlob",
        _set("key", "box-programs/"),
        "BoxProgramsBlob glucose-box-programs key",
    ),
    "a Windows zone that is not CLDR's for the stack's zone": (
        AZURE_STACK,
        "azure-native:devtestlab:GlobalSchedule",
        _set("timeZoneId", "Pacific Standard Time"),
        "CLDR's windowsZones maps America/Vancouver to 'British Columbia Standard Time'",
    ),
    "a type no table maps": (
        AWS_STACK,
        TEMPLATE,
        lambda r: setattr(r, "type", "aws:ec2/volume:Volume"),
        "aws:ec2/volume:Volume (glucose-box-template): no reference mapping for this resource type",
    ),
    "an input no row maps": (
        AWS_STACK,
        TEMPLATE,
        _set("hibernationOptions", True),
        "input 'hibernationOptions' has no reference row",
    ),
    "an input of the boxes no row maps": (
        AWS_STACK,
        BOXES,
        _set("capacityReservation", "cr-1"),
        "input 'capacityReservation' has no reference row",
    ),
    "an input of a dynamic resource no row maps": (
        AZURE_STACK,
        "pulumi-python:dynamic/glucose-training:BoxProgramsBlob",
        _set("endpoint", "https://x"),
        "input 'endpoint' has no row",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_wrong_value_is_named(case):
    stack, type_, change, needle = PLANTED[case]
    found = _planted(stack, type_, change)
    assert any(needle in line for line in found), found


def test_an_unplanted_stack_has_no_finding_to_plant_against():
    for stack in (AWS_STACK, AZURE_STACK, Stack("aws", location="eu-west-1")):
        result = stack.run()
        assert checks.declared_problems(stack.id, stack.region, result) == []


@pytest.mark.parametrize(
    ("statement", "needle"),
    [
        (
            {
                "Action": "ec2:StopInstances",
                "Resource": "arn:aws:ec2:us-east-1:123456789012:instances/i-0",
            },
            "takes no resource like",
        ),
        (
            {
                "Action": "ecr:GetAuthorizationToken",
                "Resource": "arn:aws:ecr:us-east-1:123456789012:repository/r",
            },
            "takes no resource type, only '*'",
        ),
        (
            {
                "Action": "cloudwatch:PutMetricData",
                "Resource": "*",
                "Condition": {"StringEquals": {"cloudwatch:namespace2": "x"}},
            },
            "has no condition key",
        ),
        (
            {
                "Action": "sts:AssumeRole",
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAcount": "1"}},
            },
            "has no condition key",
        ),
    ],
)
def test_an_iam_statement_the_reference_refuses_is_named(statement, needle):
    document = {"Version": iam.POLICY_VERSION, "Statement": [{"Effect": "Allow", **statement}]}
    assert any(needle in line for line in iam.document_problems(document))


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        (
            arm_urls.watchdog_deallocate_url().replace("2024-11-01", "2024-07-01"),
            "builds build_deallocate_request with api-version=2024-11-01",
        ),
        (arm_urls.watchdog_deallocate_url().replace("/deallocate", "/powerOff"), "is not the form"),
    ],
)
def test_an_arm_call_unlike_the_reference_is_named(url, needle):
    assert any(needle in line for line in arm_urls.problems("POST", url, arm_urls.DEALLOCATE, "x"))


def _keeper_call(name: str) -> dict:
    """A copy of one call of the keeper of AZURE_STACK (box 0), as declared."""
    (keeper,) = [w for w in AZURE_STACK.run().of_type(WORKFLOW) if w.name == "glucose-keeper"]
    calls = dict(arm_urls.workflow_calls(keeper.inputs["definition"]))
    return copy.deepcopy(calls[name])


def _with(name: str, change: Callable[[dict], None]) -> dict:
    inputs = _keeper_call(name)
    change(inputs)
    return inputs


PLANTED_CALLS = {
    "a schedule PATCH, which changes only tags": (
        _with("restore_stop_0", lambda i: i.update(method="PATCH")),
        "no reference of WORKFLOW_CALLS builds PATCH",
    ),
    "a schedule version the reference does not send": (
        _with(
            "restore_stop_0", lambda i: i.update(uri=i["uri"].replace("2018-09-15", "2016-05-15"))
        ),
        "builds build_create_or_update_request with api-version=2018-09-15",
    ),
    "a schedule property the model does not have": (
        _with("restore_stop_0", lambda i: i["body"]["properties"].update(state="Enabled")),
        "state: Schedule has no such property",
    ),
    "a schedule status typo": (
        _with("restore_stop_0", lambda i: i["body"]["properties"].update(status="On")),
        "'On' is not one of ['Disabled', 'Enabled']",
    ),
    "a tag operation ARM does not know": (
        _with("untag_0", lambda i: i["body"].update(operation="Remove")),
        "'Remove' is not one of ['Delete', 'Merge', 'Replace']",
    ),
    "a VM read of a version the compute reference does not send": (
        _with("read_vm_0", lambda i: i.update(uri=i["uri"].replace("2024-11-01", "2024-07-01"))),
        "builds build_get_request with api-version=2024-11-01",
    ),
    "a call outside ARM": (
        _with(
            "start_0", lambda i: i.update(uri=i["uri"].replace("management.azure.com", "x.test"))
        ),
        "is not a call to ARM",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED_CALLS))
def test_a_planted_wrong_logic_app_call_is_named(case):
    inputs, needle = PLANTED_CALLS[case]
    found = arm_urls.call_problems(inputs, case)
    assert any(needle in line for line in found), found


def test_an_unplanted_logic_app_call_has_no_finding():
    for name in ("restore_stop_0", "untag_0", "read_vm_0", "start_0"):
        assert arm_urls.call_problems(_keeper_call(name), name) == []


# The four defects of issue 22, put back into the real program: each turns it red.


def _findings(result: RunResult, stack: Stack) -> list[str]:
    return checks.declared_problems(stack.id, stack.region, result)


def test_the_apostrophe_in_the_nodes_group_is_found(monkeypatch):
    monkeypatch.setattr(
        "infra.aws.network.NODES_DESCRIPTION",
        "glucose-training boxes: all TCP between the stack's boxes, all egress",
    )
    stack = Stack("aws", nodes=2)
    found = _findings(stack.run_afresh(), stack)
    assert any("SecurityGroup glucose-nodes description" in line for line in found), found


def test_g6_in_eu_west_1_is_found_once_validation_lets_it_through(monkeypatch):
    monkeypatch.setattr(cloud_limits, "size_problems", lambda *args: [])
    stack = Stack("aws", location="eu-west-1", overrides=(("vmSize", "g6.xlarge"),))
    found = _findings(stack.run_afresh(), stack)
    assert any("candidates[].size: 'g6.xlarge' is not sold in eu-west-1" in line for line in found)


def test_twelve_alert_addresses_are_found_once_validation_lets_them_through(monkeypatch):
    monkeypatch.setitem(cloud_limits.MAX_ALERT_EMAILS, "aws", 99)
    stack = Stack("aws", overrides=(("alertEmails", json.dumps(_emails(12))),))
    found = _findings(stack.run_afresh(), stack)
    assert any("12 items, more than 11" in line for line in found), found


def test_the_hand_map_windows_ids_are_found(monkeypatch):
    hand_map = {"America/Vancouver": "Pacific Standard Time"}
    monkeypatch.setattr(
        "infra.azure.guard_rails.windows_time_zone", lambda zone: hand_map.get(zone, tz_win[zone])
    )
    stack = Stack("azure", zone="America/Vancouver")
    found = _findings(stack.run_afresh(), stack)
    assert any("timeZoneId: 'Pacific Standard Time', CLDR" in line for line in found), found


def test_a_fab_start_call_no_reference_builds_and_an_operation_off_arm_are_named():
    from tests.pulumi.references import arm_urls

    endpoint = "https://management.azure.com"
    vm = arm_urls.VM_ID
    sent = [
        ("POST", f"{endpoint}{vm}/restart?api-version=2024-11-01", None),
        ("GET", "https://elsewhere.example/subscriptions/x/operations/op-1", None),
        ("PATCH", f"{endpoint}{vm}?api-version=2019-03-01", {"properties": {}}),
        ("PATCH", f"{endpoint}{vm}?api-version=2024-11-01", {"properties": {"hardwarProfile": {}}}),
    ]
    found = arm_urls.fab_start_problems(sent, endpoint)
    assert any("no reference of FAB_START_CALLS builds POST" in line for line in found), found
    assert any("is not on https://management.azure.com" in line for line in found), found
    assert any("api-version 2019-03-01" in line for line in found), found
    assert any("hardwarProfile" in line for line in found), found


def test_a_fleet_request_ec2_would_refuse_is_named():
    from stack.ec2_launch import fleet_request
    from tests.pulumi.test_cloud_references import _launch_spec, _request_problems

    spec = _launch_spec()
    request = fleet_request(spec, list(spec.candidates))
    request["Type"] = "instnat"
    request["OnDemandOptions"]["MinTargetCapacity"] = "two"
    found = _request_problems("CreateFleet", request, {"Type": "Type"})
    assert any("'instnat' is not one of" in line for line in found), found
    assert any("MinTargetCapacity" in line for line in found), found
