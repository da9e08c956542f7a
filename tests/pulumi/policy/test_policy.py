"""The policy pack, fed what the real programs declare under Pulumi's mocks.

Good programs must pass untouched; each deliberately broken program (the real
program with one property sabotaged by a stack transformation, as a careless edit
would) must trip exactly the rule written for it. The resources reach the rules the
way the engine hands them over: camelCase properties behind the SDK's
unknown-checking proxy, with ids, parents and dependencies.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest
import yaml
from policy import policies
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tests.fakes import aws_program, azure_program
from tests.fakes.pulumi_mocks import RunResult, unwrap
from tests.paths import PULUMI_DIR

PACK_DIR = PULUMI_DIR / "policy"
PACK_START_TIMEOUT_SECONDS = 60
# A stack with no advisory either: spot capacity, storage kept through destroy.
CAREFUL = {"spot": "true", "keepStorageOnDestroy": "true"}


@dataclass(frozen=True)
class Violation:
    policy: str
    level: EnforcementLevel
    message: str
    urn: str | None


def _options(parent: str | None) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent)


def as_policy_resources(
    result: RunResult, unknown: dict[str, set[str]] | None = None
) -> list[PolicyResource]:
    """What AnalyzeStack would receive: state properties (inputs + outputs + id).

    `unknown` maps a resource type to dotted property paths the engine does not know
    yet, as in the first preview of a stack (ids, and everything computed from them).
    """
    resources: dict[str, PolicyResource] = {}
    for recorded in result.resources:
        props = unwrap(recorded.outputs) if recorded.custom else {}
        if recorded.id:
            props = {**props, "id": recorded.id}
        for path in (unknown or {}).get(recorded.type, ()):
            props = _set_path(props, path.split("."), UNKNOWN_STRING_VALUE)
        resources[recorded.urn] = PolicyResource(
            recorded.type,
            unknown_checking_proxy(props),
            recorded.urn,
            recorded.name,
            _options(recorded.parent),
            None,
            None,
            [],
            {},
        )
    for recorded in result.resources:
        resource = resources[recorded.urn]
        resource.parent = resources.get(recorded.parent or "")
        resource.dependencies = [resources[u] for u in recorded.dependencies if u in resources]
    return list(resources.values())


def _set_path(props: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    head, *rest = path
    if head not in props:
        return props
    return {**props, head: _set_path(props[head], rest, value) if rest else value}


def evaluate(resources: list[PolicyResource]) -> list[Violation]:
    """Every policy of the pack over the stack, as the engine runs them."""
    violations: list[Violation] = []
    for policy in policies.POLICIES:

        def report(message: str, urn: str | None = None, policy=policy) -> None:
            violations.append(Violation(policy.name, policy.enforcement_level, message, urn))

        if isinstance(policy, StackValidationPolicy):
            policy.validate(StackValidationArgs(resources), report)
            continue
        for resource in resources:
            args = ResourceValidationArgs(
                resource.resource_type,
                resource.props,
                resource.urn,
                resource.name,
                resource.opts,
                None,
            )
            policy.validate(args, lambda message, urn=None, r=resource: report(message, r.urn))
    return violations


def _fired(violations: list[Violation]) -> set[str]:
    return {v.policy for v in violations}


def sabotage(resource_type: str, mutate: Callable[[dict[str, Any]], None]) -> Callable:
    """A stack transformation that edits one resource type's arguments (snake_case)."""

    def transformation(args: pulumi.ResourceTransformationArgs):
        if args.type_ != resource_type:
            return None
        props = dict(args.props)
        mutate(props)
        return pulumi.ResourceTransformationResult(props, args.opts)

    return transformation


def run_aws(transformation: Callable | None = None, **overrides: str) -> RunResult:
    return aws_program.run_stack(transformation=transformation, **overrides)


def run_azure(transformation: Callable | None = None, **overrides: str) -> RunResult:
    return azure_program.run_stack(transformation=transformation, **overrides)


BOTH_CLOUDS = pytest.mark.parametrize("run", [run_aws, run_azure], ids=["aws", "azure"])


def _edit(key: str, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(props: dict[str, Any]) -> None:
        props[key] = {**props[key], **changes}

    return mutate


# --- good programs ---------------------------------------------------------------------


@BOTH_CLOUDS
def test_careful_program_passes_every_policy(run):
    assert evaluate(as_policy_resources(run(**CAREFUL))) == []


def test_careful_aws_cluster_passes_every_policy():
    result = run_aws(**CAREFUL, nodeCount="3")
    assert evaluate(as_policy_resources(result)) == []


@BOTH_CLOUDS
def test_default_program_gets_only_the_two_advisories(run):
    violations = evaluate(as_policy_resources(run()))
    assert {(v.policy, v.level) for v in violations} == {
        ("gpu-box-on-demand", EnforcementLevel.ADVISORY),
        ("storage-deleted-on-destroy", EnforcementLevel.ADVISORY),
    }


def test_storage_advisory_names_the_azure_account_that_destroy_deletes():
    result = run_azure(spot="true")
    account = result.one("azure-native:storage:StorageAccount")
    violations = evaluate(as_policy_resources(result))
    assert [(v.policy, v.urn) for v in violations] == [("storage-deleted-on-destroy", account.urn)]


# --- broken programs -------------------------------------------------------------------

SCHEDULE = "aws:scheduler/schedule:Schedule"
BUDGET = "aws:budgets/budget:Budget"
BUCKET = "aws:s3/bucket:Bucket"
INSTANCE = "aws:ec2/instance:Instance"
BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"

BROKEN_AWS = {
    "daily stop disabled": (
        sabotage(SCHEDULE, lambda p: p.update(state="DISABLED")),
        "gpu-box-daily-stop",
    ),
    "daily stop aimed at another instance": (
        sabotage(SCHEDULE, _edit("target", input=json.dumps({"InstanceIds": ["i-0other"]}))),
        "gpu-box-daily-stop",
    ),
    "daily stop calling another API": (
        sabotage(SCHEDULE, _edit("target", arn="arn:aws:scheduler:::aws-sdk:ec2:rebootInstances")),
        "gpu-box-daily-stop",
    ),
    "budget filtered to another stack": (
        sabotage(
            BUDGET,
            lambda p: p.update(cost_filters=[{"name": "TagKeyValue", "values": ["user:stack$x"]}]),
        ),
        "gpu-box-under-budget",
    ),
    "budget mailing nobody": (
        sabotage(BUDGET, lambda p: p.update(notifications=[])),
        "gpu-box-under-budget",
    ),
    "public bucket ACL": (
        sabotage(BUCKET, lambda p: p.update(acl="public-read")),
        "storage-never-public",
    ),
    "public access block with a switch off": (
        sabotage(
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            lambda p: p.update(restrict_public_buckets=False),
        ),
        "s3-public-access-blocked",
    ),
    "IMDSv1 allowed": (
        sabotage(TEMPLATE, _edit("metadata_options", http_tokens="optional")),
        "ec2-imdsv2-required",
    ),
}


@pytest.mark.parametrize("transformation, policy", BROKEN_AWS.values(), ids=BROKEN_AWS.keys())
def test_broken_aws_program_trips_exactly_its_policy(transformation, policy):
    violations = evaluate(as_policy_resources(run_aws(transformation, **CAREFUL)))
    assert _fired(violations) == {policy}
    assert all(v.level == EnforcementLevel.MANDATORY for v in violations)


AZURE_VM = "azure-native:compute:VirtualMachine"
AZURE_SCHEDULE = "azure-native:devtestlab:GlobalSchedule"
AZURE_ACCOUNT = "azure-native:storage:StorageAccount"


def _password_login(props: dict[str, Any]) -> None:
    linux = {**props["os_profile"]["linux_configuration"], "disable_password_authentication": False}
    props["os_profile"] = {**props["os_profile"], "linux_configuration": linux}


BROKEN_AZURE = {
    "shutdown schedule disabled": (
        sabotage(AZURE_SCHEDULE, lambda p: p.update(status="Disabled")),
        "gpu-box-daily-stop",
    ),
    "shutdown time as HH:MM, not HHmm": (
        sabotage(AZURE_SCHEDULE, lambda p: p.update(daily_recurrence={"time": "21:30"})),
        "gpu-box-daily-stop",
    ),
    "shutdown time zone as an IANA name, not a Windows id": (
        sabotage(AZURE_SCHEDULE, lambda p: p.update(time_zone_id="Europe/Berlin")),
        "gpu-box-daily-stop",
    ),
    "shutdown schedule for another VM": (
        sabotage(AZURE_SCHEDULE, lambda p: p.update(target_resource_id="/subscriptions/s/x/vm")),
        "gpu-box-daily-stop",
    ),
    "budget on another resource group": (
        sabotage(
            "azure-native:consumption:Budget",
            lambda p: p.update(scope="/subscriptions/s/resourceGroups/someone-else"),
        ),
        "gpu-box-under-budget",
    ),
    "anonymous blob reads allowed": (
        sabotage(AZURE_ACCOUNT, lambda p: p.update(allow_blob_public_access=True)),
        "storage-never-public",
    ),
    "public container": (
        sabotage("azure-native:storage:BlobContainer", lambda p: p.update(public_access="Blob")),
        "storage-never-public",
    ),
    "password login": (sabotage(AZURE_VM, _password_login), "azure-vm-password-auth-off"),
}


@pytest.mark.parametrize("transformation, policy", BROKEN_AZURE.values(), ids=BROKEN_AZURE.keys())
def test_broken_azure_program_trips_exactly_its_policy(transformation, policy):
    violations = evaluate(as_policy_resources(run_azure(transformation, **CAREFUL)))
    assert _fired(violations) == {policy}
    assert all(v.level == EnforcementLevel.MANDATORY for v in violations)


@BOTH_CLOUDS
def test_ssh_from_anywhere_is_refused_even_when_the_stack_insists(run):
    result = run(**CAREFUL, sshAllowedCidr="0.0.0.0/0", allowSshFromAnywhere="true")
    assert _fired(evaluate(as_policy_resources(result))) == {"no-ssh-from-anywhere"}


def test_a_missing_daily_stop_names_the_box_it_leaves_running():
    result = run_aws(sabotage(SCHEDULE, lambda p: p.update(state="DISABLED")), **CAREFUL)
    (violation,) = evaluate(as_policy_resources(result))
    assert violation.urn == result.one(BOXES).urn
    assert "glucose-boxes box 0 (i-glucose-boxes-0)" in violation.message


def test_cluster_with_one_box_left_out_of_the_daily_stop_names_that_box():
    first_box_only = {"InstanceIds": ["i-glucose-boxes-0"]}  # the mock's id
    transformation = sabotage(SCHEDULE, _edit("target", input=json.dumps(first_box_only)))
    result = run_aws(transformation, **CAREFUL, nodeCount="2")
    (violation,) = evaluate(as_policy_resources(result))
    assert violation.urn == result.one(BOXES).urn
    assert violation.message.startswith("glucose-boxes box 1 (i-glucose-boxes-1) has no")


def test_boxes_of_gpu_candidates_are_gpu_boxes_whatever_size_was_taken():
    assert policies.is_gpu_box(BOXES, {"candidates": [{"size": "g6.xlarge"}]})
    assert not policies.is_gpu_box(BOXES, {"candidates": [{"size": "t3.micro"}]})


def test_boxes_are_under_the_budget_through_their_launch_templates_tags():
    sabotaged = sabotage(TEMPLATE, lambda p: p.update(tag_specifications=[]))
    result = run_aws(sabotaged, **CAREFUL)
    assert _fired(evaluate(as_policy_resources(result))) == {"gpu-box-under-budget"}


# --- preview: ids not known yet --------------------------------------------------------


# What a first preview cannot know: every id, and whatever is computed from one.
AWS_PREVIEW_UNKNOWNS = {
    BOXES: {"id", "instanceIds", "launchTemplateId"},
    TEMPLATE: {"id"},
    SCHEDULE: {"target.input"},
    BUCKET: {"id", "bucket"},
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": {"bucket"},
}
AZURE_PREVIEW_UNKNOWNS = {
    AZURE_VM: {"id", "resourceGroupName"},
    "azure-native:resources:ResourceGroup": {"id", "name"},
    AZURE_SCHEDULE: {"targetResourceId", "resourceGroupName"},
    "azure-native:consumption:Budget": {"scope"},
}


def test_during_preview_aws_links_are_matched_through_dependencies():
    resources = as_policy_resources(run_aws(**CAREFUL), AWS_PREVIEW_UNKNOWNS)
    assert evaluate(resources) == []


def test_during_preview_azure_links_are_matched_through_dependencies():
    resources = as_policy_resources(run_azure(**CAREFUL), AZURE_PREVIEW_UNKNOWNS)
    assert evaluate(resources) == []


def test_during_preview_a_schedule_without_the_dependency_does_not_count():
    resources = as_policy_resources(run_aws(**CAREFUL), AWS_PREVIEW_UNKNOWNS)
    schedule = next(r for r in resources if r.resource_type == SCHEDULE)
    schedule.dependencies = [d for d in schedule.dependencies if d.resource_type != BOXES]
    assert _fired(evaluate(resources)) == {"gpu-box-daily-stop"}


# --- single rules on hand-made resources -----------------------------------------------


def _check(rule: Callable, resource_type: str, props: dict[str, Any]) -> list[str]:
    messages: list[str] = []
    args = ResourceValidationArgs(
        resource_type, unknown_checking_proxy(props), "urn:x", "x", _options(None), None
    )
    rule(args, lambda message, urn=None: messages.append(message))
    return messages


def _tcp(low: int, high: int, cidr: str) -> dict[str, Any]:
    return {"protocol": "tcp", "fromPort": low, "toPort": high, "cidrBlocks": [cidr]}


SSH_RULES = {
    "aws rule resource, tcp 22 from anywhere": (
        "aws:ec2/securityGroupRule:SecurityGroupRule",
        {"type": "ingress", **_tcp(22, 22, "0.0.0.0/0")},
        True,
    ),
    "aws vpc ingress rule, all traffic from ipv6 anywhere": (
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        {"ipProtocol": "-1", "cidrIpv6": "::/0"},
        True,
    ),
    "aws port range 20-30 from anywhere": (
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [_tcp(20, 30, "0.0.0.0/0")]},
        True,
    ),
    "aws https from anywhere": (
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [_tcp(443, 443, "0.0.0.0/0")]},
        False,
    ),
    "azure rule from Internet on a port range": (
        "azure-native:network:SecurityRule",
        {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
         "sourceAddressPrefix": "Internet", "destinationPortRange": "20-25"},
        True,
    ),
    "azure nsg with any-port rule from *": (
        "azure-native:network:NetworkSecurityGroup",
        {"securityRules": [{"name": "all", "direction": "Inbound", "access": "Allow",
                            "protocol": "*", "sourceAddressPrefixes": ["*"],
                            "destinationPortRange": "*"}]},
        True,
    ),
    "aws tcp 22 from half the internet": (
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [_tcp(22, 22, "0.0.0.0/1")]},
        True,
    ),
    "aws tcp 22 from a /8": (
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [_tcp(22, 22, "10.0.0.0/8")]},
        False,
    ),
    "azure rule from a /4": (
        "azure-native:network:SecurityRule",
        {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
         "sourceAddressPrefix": "64.0.0.0/4", "destinationPortRange": "22"},
        True,
    ),
    "azure rule from a service tag": (
        "azure-native:network:SecurityRule",
        {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
         "sourceAddressPrefix": "AzureLoadBalancer", "destinationPortRange": "22"},
        False,
    ),
    "azure deny rule from anywhere": (
        "azure-native:network:SecurityRule",
        {"direction": "Inbound", "access": "Deny", "protocol": "*",
         "sourceAddressPrefix": "*", "destinationPortRange": "22"},
        False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("resource_type, props, fires", SSH_RULES.values(), ids=SSH_RULES.keys())
def test_ssh_rule_covers_every_way_of_writing_an_inbound_rule(resource_type, props, fires):
    assert bool(_check(policies.no_ssh_from_anywhere, resource_type, props)) is fires


def test_azure_storage_account_must_refuse_public_blobs_explicitly():
    account = "azure-native:storage:StorageAccount"
    assert _check(policies.storage_never_public, account, {})
    assert not _check(policies.storage_never_public, account, {"allowBlobPublicAccess": False})


def test_azure_vm_with_a_password_is_refused():
    props = {
        "hardwareProfile": {"vmSize": "Standard_NC4as_T4_v3"},
        "osProfile": {
            "adminPassword": "hunter2",
            "linuxConfiguration": {"disablePasswordAuthentication": False},
        },
    }
    messages = _check(
        policies.azure_password_auth_off, "azure-native:compute:VirtualMachine", props
    )
    assert len(messages) == 2


def test_only_gpu_sizes_count_as_gpu_boxes():
    assert policies.is_gpu_box(INSTANCE, {"instanceType": "p4d.24xlarge"})
    assert policies.is_gpu_box(INSTANCE, {"instanceType": "g6.xlarge"})
    assert not policies.is_gpu_box(INSTANCE, {"instanceType": "t3.micro"})
    vm = "azure-native:compute:VirtualMachine"
    assert policies.is_gpu_box(vm, {"hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"}})
    assert not policies.is_gpu_box(vm, {"hardwareProfile": {"vmSize": "Standard_D4s_v5"}})


def test_an_unknown_instance_type_in_preview_is_not_guessed_to_be_a_gpu():
    props = unknown_checking_proxy({"instanceType": UNKNOWN_STRING_VALUE})
    assert not policies.is_gpu_box(INSTANCE, props)


# --- the pack itself -------------------------------------------------------------------


def test_policy_names_are_unique_and_levels_as_documented():
    levels = {p.name: p.enforcement_level for p in policies.POLICIES}
    assert len(levels) == len(policies.POLICIES)
    advisory = {n for n, level in levels.items() if level == EnforcementLevel.ADVISORY}
    assert advisory == {"gpu-box-on-demand", "storage-deleted-on-destroy"}


def test_pack_project_file_names_the_python_runtime_and_the_project_venv():
    project = yaml.safe_load((PACK_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    venv = (PACK_DIR / project["runtime"]["options"]["virtualenv"]).resolve()
    assert venv == (PACK_DIR.parents[1] / ".venv").resolve()


def test_pack_starts_and_serves_the_engine_on_a_local_port():
    # The CLI runs the pack with its directory first on sys.path and reads the port
    # from the first line of stdout.
    process = subprocess.Popen(
        [sys.executable, str(PACK_DIR / "__main__.py")],
        cwd=PACK_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first_line = process.stdout.readline()
        assert first_line.strip().isdigit(), process.stderr.read() if process.poll() else first_line
    finally:
        process.kill()
        process.wait(timeout=PACK_START_TIMEOUT_SECONDS)


def test_the_packs_copies_of_the_stack_configs_rules_are_equal_to_them():
    # The pack runs alone (its own directory on sys.path): it keeps copies, held here.
    from stack import config

    assert policies.NARROWEST_BROAD_PREFIX == config.NARROWEST_BROAD_PREFIX
    assert policies.KEEP_TAG == config.KEEP_ON_DESTROY_TAG
