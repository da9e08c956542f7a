"""Azure's money guard rails outside the box: the daily hard stop and the budget.

The on-box idle watchdog is the first layer (box/); these work even
when the box is wedged: the DevTestLab schedule deallocates the VM every day, and the
budget mails people before and when the month's money is spent. A budget alone stops
nothing; unless `budgetStopsBoxes: false`, its Actual 100 % alert also goes to an
action group whose Logic App deallocates every box (its managed identity holds the
built-in power-on-off role on each VM), each VM's run deadline tag deleted first so
the keeper (keeper.py) does not start it again. Budgets are evaluated a few times a
day, so this is the last layer, not the first. And a deallocate that fails, whoever
asked for it (the watchdog, the daily stop, a Logic App), mails the alert list: the
box is STILL BILLED, and Azure is the one that can say so while nobody looks at `fab
status`.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Any

import pulumi
from pulumi_azure_native import compute, consumption, devtestlab, logic, monitor, resources

from box.contract import DEADLINE_TAG
from box.watchdog_config import ARM_API_VERSION, ARM_TAGS_API_VERSION, ARM_TAGS_PATH, daily_time
from infra.azure.access import (
    POWER_ON_OFF,
    SERVICE_PRINCIPAL,
    TAG_CONTRIBUTOR,
    builtin_role,
    grant,
)
from infra.azure.names import bounded
from stack.config import StackConfig
from stack.time_zones import windows_time_zone

SHUTDOWN_NOTICE_MINUTES = 15
# No reference states how long a budget's name may be (the 2024-08-01 model and its
# request builder leave it open): kept within 63, which other ARM names share, so a
# long stack name cannot be the one thing Azure refuses after the boxes exist.
BUDGET_NAME_MAX = 63
ACTUAL_ALERT_PERCENTS = (50, 80, 100)
FORECAST_ALERT_PERCENTS = (100,)
STOP_PERCENT = 100
STOP_TRIGGER = "budget_exceeded"
ARM_AUDIENCE = "https://management.azure.com/"
ACTION_GROUP_SHORT_NAME = "glucosestop"  # at most 12 characters
MAIL_GROUP_SHORT_NAME = "glucosemail"
DEALLOCATE_OPERATION = "Microsoft.Compute/virtualMachines/deallocate/action"
WORKFLOW_SCHEMA = (
    "https://schema.management.azure.com/providers/Microsoft.Logic/schemas/"
    "2016-06-01/workflowdefinition.json#"
)
# What azure-native sends for the schedule (GlobalSchedule); the keeper's calls to it
# use the same (tests/pulumi/test_cloud_references.py checks both).
SCHEDULES_API_VERSION = "2018-09-15"
# A Logic App action runs after the one before it only if that one ended so; an action
# that must run whatever came before names every end.
ANY_END = ["Succeeded", "Failed", "Skipped", "TimedOut"]


def declare_daily_stop(
    name: str,
    vm: compute.VirtualMachine,
    group: resources.ResourceGroup,
    config: StackConfig,
    parent: pulumi.Resource,
) -> devtestlab.GlobalSchedule:
    """Deallocate `vm` daily at the configured time, mailing the alert list before."""
    return devtestlab.GlobalSchedule(
        name,
        # Azure treats a schedule as a VM's auto-shutdown only under exactly this name.
        name=vm.name.apply(lambda vm_name: f"shutdown-computevm-{vm_name}"),
        resource_group_name=group.name,
        location=group.location,
        tags=config.tags,
        opts=pulumi.ResourceOptions(parent=parent),
        **_python_names(daily_stop_properties(config, vm.id)),
    )


def daily_stop_properties(config: StackConfig, vm_id: pulumi.Input[str]) -> dict[str, Any]:
    """The daily stop's `properties` as ARM has them: what `declare_daily_stop` declares
    and what the keeper puts back when it enables a stop a long run turned off."""
    return {
        "status": "Enabled",  # the SDK's default is Disabled
        "taskType": "ComputeVmShutdownTask",
        "dailyRecurrence": {"time": "{:02d}{:02d}".format(*daily_time(config.auto_shutdown_time))},
        "timeZoneId": windows_time_zone(config.auto_shutdown_time_zone),
        "targetResourceId": vm_id,
        "notificationSettings": {
            "status": "Enabled",
            "timeInMinutes": SHUTDOWN_NOTICE_MINUTES,
            "emailRecipient": ";".join(config.alert_emails),
            "notificationLocale": "en",
        },
    }


def _python_names(properties: dict[str, Any]) -> dict[str, Any]:
    """ARM's camelCase keys, nested ones too, as the Python SDK's arguments take them."""
    return {
        re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(): (
            _python_names(value) if isinstance(value, dict) else value
        )
        for key, value in properties.items()
    }


def declare_budget(
    name: str,
    group: resources.ResourceGroup,
    config: StackConfig,
    parent: pulumi.Resource,
    stop_group: monitor.ActionGroup | None = None,
) -> consumption.Budget:
    """A cost budget on the stack's resource group with Actual and Forecasted alerts;
    the Actual 100 % alert also fires `stop_group` when there is one."""
    thresholds = [("Actual", p) for p in ACTUAL_ALERT_PERCENTS]
    thresholds += [("Forecasted", p) for p in FORECAST_ALERT_PERCENTS]
    notifications = {
        f"{kind.lower()}{percent}": {
            "enabled": True,
            "operator": "GreaterThanOrEqualTo",
            "threshold": percent,
            "threshold_type": kind,
            "contact_emails": list(config.alert_emails),
            "locale": "en-us",
        }
        for kind, percent in thresholds
    }
    if stop_group is not None:
        notifications[f"actual{STOP_PERCENT}"]["contact_groups"] = [stop_group.id]
    return consumption.Budget(
        name,
        budget_name=bounded(f"{config.project}-{config.stack}-monthly", BUDGET_NAME_MAX),
        scope=group.id,
        amount=config.budget_amount,
        category="Cost",
        time_grain="Monthly",
        # Azure wants the first of a month; later runs must not move it.
        time_period={"start_date": _first_of_this_month()},
        notifications=notifications,
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["timePeriod"]),
    )


def declare_still_billed_alert(
    name: str, group: resources.ResourceGroup, config: StackConfig, parent: pulumi.Resource
) -> monitor.ActivityLogAlert:
    """Mail the alert list when a deallocate of a VM in the stack's resource group fails.
    The watchdog retries 1, 2, 4 ... 30 min apart, so the mails are as few as its tries;
    a watchdog that cannot reach ARM at all leaves no event: the daily stop remains."""
    child = pulumi.ResourceOptions(parent=parent)
    mail = _action_group(
        f"{name}-mail",
        group,
        MAIL_GROUP_SHORT_NAME,
        config,
        child,
        email_receivers=[
            {"name": f"alert-{index}", "email_address": address, "use_common_alert_schema": True}
            for index, address in enumerate(config.alert_emails)
        ],
    )
    return monitor.ActivityLogAlert(
        name,
        resource_group_name=group.name,
        location="Global",
        scopes=[group.id],
        enabled=True,
        description=(
            f"{config.project}/{config.stack}: deallocating a box failed; it is STILL BILLED "
            "until a retry works (`fab status` shows the watchdog's tries)"
        ),
        condition={
            "all_of": [
                {"field": "category", "equals": "Administrative"},
                {"field": "operationName", "equals": DEALLOCATE_OPERATION},
                {"field": "status", "equals": "Failed"},
            ]
        },
        actions={"action_groups": [{"action_group_id": mail.id}]},
        tags=config.tags,
        opts=child,
    )


def _first_of_this_month() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-01T00:00:00Z")


def declare_budget_stop(
    name: str,
    vms: Sequence[compute.VirtualMachine],
    group: resources.ResourceGroup,
    subscription_id: pulumi.Input[str],
    config: StackConfig,
    parent: pulumi.Resource,
) -> monitor.ActionGroup:
    """An action group whose Logic App deallocates every box when the budget fires it
    (each VM's run deadline tag deleted first: the keeper would start it again)."""
    child = pulumi.ResourceOptions(parent=parent)
    workflow = logic.Workflow(
        f"{name}-flow",
        resource_group_name=group.name,
        location=group.location,
        identity={"type": "SystemAssigned"},
        state="Enabled",
        definition=pulumi.Output.all(*[vm.id for vm in vms]).apply(
            lambda ids: deallocate_workflow(list(ids))
        ),
        tags=config.tags,
        opts=child,
    )
    identity = workflow.identity.apply(lambda i: i.principal_id)
    power_role = builtin_role(subscription_id, POWER_ON_OFF)
    tag_role = builtin_role(subscription_id, TAG_CONTRIBUTOR)
    grants = [
        grant(f"{name}-{index}-{verb}", identity, vm.id, role, parent, SERVICE_PRINCIPAL)
        for index, vm in enumerate(vms)
        for verb, role in (("deallocate", power_role), ("untag", tag_role))
    ]
    callback = logic.list_workflow_trigger_callback_url_output(
        resource_group_name=group.name,
        workflow_name=workflow.name,
        trigger_name=STOP_TRIGGER,
        opts=pulumi.InvokeOutputOptions(parent=parent),
    ).value
    return _action_group(
        f"{name}-group",
        group,
        ACTION_GROUP_SHORT_NAME,
        config,
        pulumi.ResourceOptions(parent=parent, depends_on=grants),
        logic_app_receivers=[
            {
                "name": "deallocate-boxes",
                "resource_id": workflow.id,
                # The URL carries the trigger's signature: whoever has it can fire it.
                "callback_url": pulumi.Output.secret(callback),
                "use_common_alert_schema": True,
            }
        ],
    )


def _action_group(
    name: str,
    group: resources.ResourceGroup,
    short_name: str,
    config: StackConfig,
    opts: pulumi.ResourceOptions,
    **receivers: Any,
) -> monitor.ActionGroup:
    """An enabled action group of the stack (short name: at most 12 characters)."""
    return monitor.ActionGroup(
        name,
        resource_group_name=group.name,
        location="Global",
        group_short_name=short_name,
        enabled=True,
        tags=config.tags,
        opts=opts,
        **receivers,
    )


def deallocate_workflow(vm_ids: list[str]) -> dict:
    """A Logic App definition: an HTTP trigger, then per VM, all VMs in parallel: read its
    tags, delete its run deadline tag, deallocate it (whether or not the tag went)."""
    actions = {}
    for index, vm_id in enumerate(vm_ids):
        read, untag = f"read_tags_{index}", f"untag_{index}"
        deadline = f"coalesce(body('{read}')?['properties']?['tags']?['{DEADLINE_TAG}'], '')"
        actions[read] = arm_action("GET", f"{vm_id}{ARM_TAGS_PATH}", ARM_TAGS_API_VERSION)
        actions[untag] = untag_action(vm_id, deadline, after={read: ["Succeeded"]})
        actions[f"deallocate_{index}"] = arm_action(
            "POST", f"{vm_id}/deallocate", ARM_API_VERSION, after={untag: ANY_END}
        )
    trigger = {"type": "Request", "kind": "Http", "inputs": {"schema": {}}}
    return workflow_definition({STOP_TRIGGER: trigger}, actions)


def workflow_definition(triggers: dict[str, Any], actions: dict[str, Any]) -> dict:
    """A Logic App definition of these triggers and actions."""
    return {
        "$schema": WORKFLOW_SCHEMA,
        "contentVersion": "1.0.0.0",
        "triggers": triggers,
        "actions": actions,
        "outputs": {},
    }


def arm_action(
    method: str,
    path: str,
    api_version: str,
    *,
    after: dict[str, list[str]] | None = None,
    body: dict[str, Any] | None = None,
    expand: str = "",
) -> dict[str, Any]:
    """An HTTP action calling ARM at `path` with the workflow's own managed identity, run
    after the actions `after` names (at the start of its scope when none)."""
    query = f"?api-version={api_version}" + (f"&$expand={expand}" if expand else "")
    inputs: dict[str, Any] = {
        "method": method,
        "uri": f"{ARM_AUDIENCE.rstrip('/')}{path}{query}",
        "authentication": {"type": "ManagedServiceIdentity", "audience": ARM_AUDIENCE},
    }
    if body is not None:
        inputs["body"] = body
    return {"type": "Http", "runAfter": after or {}, "inputs": inputs}


def untag_action(
    vm_id: str, deadline: str, *, after: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """Delete the VM's run deadline tag; `deadline` is an expression for the value it
    holds (ARM deletes "based on given names or name/value pairs": naming the value
    deletes it under either reading)."""
    body = {"operation": "Delete", "properties": {"tags": {DEADLINE_TAG: f"@{deadline}"}}}
    return arm_action(
        "PATCH", f"{vm_id}{ARM_TAGS_PATH}", ARM_TAGS_API_VERSION, after=after, body=body
    )
