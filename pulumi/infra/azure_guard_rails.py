"""Azure's money guard rails outside the box: the daily hard stop and the budget.

The on-box idle watchdog is the first layer (pulumi/infra/box/); these two work even
when the box is wedged: the DevTestLab schedule deallocates the VM every day, and the
budget mails people before and when the month's money is spent (it stops nothing).
"""

from __future__ import annotations

import datetime

import pulumi
from pulumi_azure_native import compute, consumption, devtestlab, resources

from infra.config import StackConfig
from infra.time_zones import windows_time_zone

SHUTDOWN_NOTICE_MINUTES = 15
ACTUAL_ALERT_PERCENTS = (50, 80, 100)
FORECAST_ALERT_PERCENTS = (100,)


def shutdown_schedule(
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
        status="Enabled",  # the SDK's default is Disabled
        task_type="ComputeVmShutdownTask",
        daily_recurrence={"time": config.auto_shutdown_time.replace(":", "")},  # HHmm
        time_zone_id=windows_time_zone(config.auto_shutdown_time_zone),
        target_resource_id=vm.id,
        notification_settings={
            "status": "Enabled",
            "time_in_minutes": SHUTDOWN_NOTICE_MINUTES,
            "email_recipient": ";".join(config.alert_emails),
            "notification_locale": "en",
        },
        tags=config.tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def monthly_budget(
    name: str, group: resources.ResourceGroup, config: StackConfig, parent: pulumi.Resource
) -> consumption.Budget:
    """A cost budget on the stack's resource group with Actual and Forecasted alerts."""
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
    return consumption.Budget(
        name,
        budget_name=f"{config.project}-{config.stack}-monthly",
        scope=group.id,
        amount=config.budget_amount,
        category="Cost",
        time_grain="Monthly",
        # Azure wants the first of a month; later runs must not move it.
        time_period={"start_date": _first_of_this_month()},
        notifications=notifications,
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["timePeriod"]),
    )


def _first_of_this_month() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-01T00:00:00Z")
