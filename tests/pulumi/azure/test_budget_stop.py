"""Budgets that act: at 100 % of the actual monthly spend the boxes stop, on both clouds."""

from __future__ import annotations

import json

import pytest

from box.contract import DEADLINE_TAG
from box.watchdog_config import ARM_API_VERSION, ARM_TAGS_PATH
from infra.aws import guard_rails as aws_guard_rails
from infra.azure import guard_rails as azure_guard_rails
from tests.fakes import aws_program, azure_program
from tests.fakes.pulumi_mocks import RunResult, unwrap

BUDGET_ACTION = "aws:budgets/budgetAction:BudgetAction"
COST_TAG = "aws:costexplorer/costAllocationTag:CostAllocationTag"
WORKFLOW = "azure-native:logic:Workflow"
ACTION_GROUP = "azure-native:monitor:ActionGroup"
AZURE_BUDGET = "azure-native:consumption:Budget"
ACTIVITY_LOG_ALERT = "azure-native:monitor:ActivityLogAlert"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"


@pytest.fixture(scope="module")
def aws_pair() -> RunResult:
    return aws_program.run_stack(nodeCount="2")


@pytest.fixture(scope="module")
def azure_pair() -> RunResult:
    return azure_program.run_stack(nodeCount="2")


def _stop_group(result: RunResult):
    """The action group that deallocates (the other one mails)."""
    (group,) = [g for g in result.of_type(ACTION_GROUP) if g.inputs.get("logicAppReceivers")]
    return group


def _stop_flow(result: RunResult):
    """The budget stop's Logic App (the keeper is one too)."""
    return result.named("glucose-budget-stop-flow")


def _ids(result: RunResult, type_: str) -> list[str]:
    return [r.id for r in result.of_type(type_)]


# --- AWS -------------------------------------------------------------------------------


def test_aws_budget_action_stops_every_box_at_100_percent_of_actual(aws_pair):
    action = aws_pair.one(BUDGET_ACTION).inputs
    assert action["budgetName"] == aws_pair.one("aws:budgets/budget:Budget").outputs["name"]
    assert (action["actionType"], action["approvalModel"]) == ("RUN_SSM_DOCUMENTS", "AUTOMATIC")
    assert action["notificationType"] == "ACTUAL"
    assert action["actionThreshold"] == {
        "actionThresholdType": "PERCENTAGE",
        "actionThresholdValue": 100,
    }
    ssm = action["definition"]["ssmActionDefinition"]
    assert ssm["actionSubType"] == "STOP_EC2_INSTANCES"
    boxes = aws_pair.one("pulumi-python:dynamic/glucose-training:Ec2Boxes")
    assert ssm["instanceIds"] == boxes.outputs["instanceIds"]
    assert ssm["region"] == aws_program.REGION
    assert action["subscribers"] == [
        {"address": "me@lab.dev", "subscriptionType": "EMAIL"},
        {"address": "lab@lab.dev", "subscriptionType": "EMAIL"},
    ]


def test_aws_budget_action_role_is_budgets_own_with_aws_ssm_stop_policy(aws_pair):
    action = aws_pair.one(BUDGET_ACTION)
    role = aws_pair.named("glucose-budget-stop-role")
    assert action.inputs["executionRoleArn"] == role.outputs["arn"]
    (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust["Principal"] == {"Service": "budgets.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": aws_program.ACCOUNT_ID}}
    attachment = aws_pair.named("glucose-budget-stop-access")
    assert attachment.inputs["policyArn"] == aws_guard_rails.BUDGET_ACTION_POLICY_ARN
    assert attachment.urn in action.dependencies


def test_aws_stack_may_opt_out_of_the_budget_stop():
    result = aws_program.run_stack(budgetStopsBoxes="false")
    assert result.of_type(BUDGET_ACTION) == []
    assert len(result.one("aws:budgets/budget:Budget").inputs["notifications"]) == 4


def test_cost_scope_tag_waits_while_billing_has_not_seen_it(aws_pair):
    assert aws_pair.of_type(COST_TAG) == []
    (_, args) = next(c for c in aws_pair.calls if c[0] == "aws:costexplorer/getTags:getTags")
    assert args["searchString"] == "cost-scope"


def test_cost_scope_tag_is_activated_once_known_and_kept_through_destroy():
    recorder = aws_program.aws_recorder()
    recorder._calls["aws:costexplorer/getTags:getTags"] = lambda a: {
        "id": "tags",
        "tags": ["cost-scope", "stack"],
    }
    tag = aws_program.run_stack(recorder).one(COST_TAG)
    assert (tag.inputs["tagKey"], tag.inputs["status"]) == ("cost-scope", "Active")
    # Shared by every stack of the project in the account: destroying one keeps it on.
    assert tag.retain_on_delete


def test_cost_scope_tag_is_left_alone_when_the_payer_account_owns_it():
    result = aws_program.run_stack(activateCostAllocationTag="false")
    assert result.of_type(COST_TAG) == []
    assert not [c for c in result.calls if "getTags" in c[0]]


def test_a_cost_explorer_that_will_not_answer_never_blocks_the_up():
    recorder = aws_program.aws_recorder()

    recorder._calls["aws:costexplorer/getTags:getTags"] = lambda a: (
        {},
        [("", "AccessDeniedException: not authorized to perform ce:GetTags")],
    )
    result = aws_program.run_stack(recorder)
    assert result.of_type(COST_TAG) == [] and result.of_type(
        "pulumi-python:dynamic/glucose-training:Ec2Boxes"
    )


# --- Azure -----------------------------------------------------------------------------


def test_azure_budget_alert_at_100_percent_fires_the_stop_action_group(azure_pair):
    notifications = azure_pair.one(AZURE_BUDGET).inputs["notifications"]
    group = _stop_group(azure_pair)
    assert notifications["actual100"]["contactGroups"] == [group.id]
    others = [n for key, n in notifications.items() if key != "actual100"]
    assert all("contactGroups" not in n for n in others)


def test_azure_action_group_calls_the_deallocating_logic_app(azure_pair):
    group = _stop_group(azure_pair).inputs
    workflow = _stop_flow(azure_pair)
    (receiver,) = unwrap(group["logicAppReceivers"])
    assert receiver["resourceId"] == workflow.id
    assert receiver["callbackUrl"].startswith("https://logic.example/workflows/")
    assert (group["location"], group["enabled"]) == ("Global", True)
    assert len(group["groupShortName"]) <= 12


def _stop_actions(result: RunResult) -> dict:
    return unwrap(_stop_flow(result).inputs["definition"])["actions"]


def test_azure_logic_app_deallocates_every_box_with_its_own_identity(azure_pair):
    workflow = _stop_flow(azure_pair).inputs
    assert workflow["identity"] == {"type": "SystemAssigned"} and workflow["state"] == "Enabled"
    definition = unwrap(workflow["definition"])
    assert set(definition["triggers"]) == {azure_guard_rails.STOP_TRIGGER}
    calls = [action["inputs"] for action in definition["actions"].values()]
    vm_ids = _ids(azure_pair, "azure-native:compute:VirtualMachine")
    assert sorted(call["uri"] for call in calls if call["method"] == "POST") == sorted(
        f"https://management.azure.com{vm}/deallocate?api-version={ARM_API_VERSION}"
        for vm in vm_ids
    )
    assert all(call["authentication"]["type"] == "ManagedServiceIdentity" for call in calls)


VM_ID = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/v"


def test_azure_logic_app_deletes_each_boxs_deadline_tag_before_deallocating():
    # The keeper would start a budget-stopped box again until its run's deadline.
    actions = azure_guard_rails.deallocate_workflow([VM_ID])["actions"]
    tags_uri = f"https://management.azure.com{VM_ID}{ARM_TAGS_PATH}?api-version=2021-04-01"
    read, untag, deallocate = (actions[n] for n in ("read_tags_0", "untag_0", "deallocate_0"))
    assert (read["inputs"]["method"], read["inputs"]["uri"]) == ("GET", tags_uri)
    assert (untag["inputs"]["method"], untag["inputs"]["uri"]) == ("PATCH", tags_uri)
    assert untag["runAfter"] == {"read_tags_0": ["Succeeded"]}
    assert list(deallocate["runAfter"]) == ["untag_0"]


def test_azure_logic_app_names_the_deadline_tag_with_the_value_it_read():
    untag = azure_guard_rails.deallocate_workflow([VM_ID])["actions"]["untag_0"]
    assert untag["inputs"]["body"] == {
        "operation": "Delete",
        "properties": {
            "tags": {
                DEADLINE_TAG: f"@coalesce(body('read_tags_0')?['properties']?['tags']?"
                f"['{DEADLINE_TAG}'], '')"
            }
        },
    }


def test_azure_logic_app_deallocates_whatever_became_of_the_tag():
    # Stopping the bill comes first: a tag that would not go must not keep a box up.
    deallocate = azure_guard_rails.deallocate_workflow([VM_ID])["actions"]["deallocate_0"]
    assert deallocate["runAfter"] == {"untag_0": ["Succeeded", "Failed", "Skipped", "TimedOut"]}


def test_azure_logic_app_may_power_off_and_untag_exactly_the_boxes(azure_pair):
    principal = _stop_flow(azure_pair).outputs["identity"]["principalId"]
    grants = [r.inputs for r in azure_pair.of_type(ROLE_ASSIGNMENT)
              if r.inputs["principalId"] == principal]  # fmt: skip
    vm_ids = _ids(azure_pair, "azure-native:compute:VirtualMachine")
    roles = {"40c5ff49-9181-41f8-ae61-143b0e78555e", "4a9ae827-6dc8-4573-8ac7-8239d42aa03f"}
    assert sorted((g["scope"], g["roleDefinitionId"].rsplit("/", 1)[1]) for g in grants) == sorted(
        (vm, role) for vm in vm_ids for role in roles
    )
    assert all(g["principalType"] == "ServicePrincipal" for g in grants)


def test_azure_stack_may_opt_out_of_the_budget_stop():
    result = azure_program.run_stack(budgetStopsBoxes="false")
    assert [w.name for w in result.of_type(WORKFLOW)] == ["glucose-keeper"]
    assert all(not g.inputs.get("logicAppReceivers") for g in result.of_type(ACTION_GROUP))
    notifications = result.one(AZURE_BUDGET).inputs["notifications"]
    assert all("contactGroups" not in n for n in notifications.values())


def test_azure_a_failed_deallocate_mails_the_alert_list(azure_pair):
    alert = azure_pair.one(ACTIVITY_LOG_ALERT).inputs
    assert alert["scopes"] == [azure_pair.one("azure-native:resources:ResourceGroup").id]
    assert alert["condition"]["allOf"] == [
        {"field": "category", "equals": "Administrative"},
        {"field": "operationName", "equals": "Microsoft.Compute/virtualMachines/deallocate/action"},
        {"field": "status", "equals": "Failed"},
    ]
    assert (alert["location"], alert["enabled"]) == ("Global", True)
    assert "STILL BILLED" in alert["description"]
    [action] = alert["actions"]["actionGroups"]
    (mail,) = [g for g in azure_pair.of_type(ACTION_GROUP) if g.id == action["actionGroupId"]]
    addresses = [r["emailAddress"] for r in mail.inputs["emailReceivers"]]
    assert addresses == ["ana@lab.dev", "ben@lab.dev"]  # the stack's alertEmails
    assert len(mail.inputs["groupShortName"]) <= 12


def test_azure_still_billed_mail_stays_when_the_budget_stop_is_opted_out():
    result = azure_program.run_stack(budgetStopsBoxes="false")
    assert result.one(ACTIVITY_LOG_ALERT).inputs["enabled"] is True
