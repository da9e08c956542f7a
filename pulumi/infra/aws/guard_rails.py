"""The daily stop and the budget guard rails (docs/guard-rails.md) for AWS, plus the idle
alarm behind the watchdog.

- a daily hard stop: an EventBridge Scheduler schedule calling the universal target
  `ec2:stopInstances` through a role allowed only that, on these instances;
- a monthly cost budget mailing ACTUAL 50/80/100 % and FORECASTED 100 %, counting what
  carries this stack's `cost-scope` tag (activated for cost allocation from here), and,
  unless `budgetStopsBoxes: false`, a Budgets action that stops the boxes at 100 % of
  the actual spend;
- per box, a CloudWatch alarm on the watchdog's verdict whose action stops the
  instance (`arn:aws:automate:<region>:ec2:stop` needs no role of ours).
"""

from __future__ import annotations

import datetime
import json

import pulumi
import pulumi_aws as aws

from box import contract
from box.watchdog_config import daily_time
from infra.aws import access
from stack.config import COST_SCOPE_TAG, StackConfig

STOP_INSTANCES_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
STOP_RETRY_ATTEMPTS = 5

BUDGET_ACTUAL_PERCENTS = (50, 80, 100)
BUDGET_FORECASTED_PERCENTS = (100,)
# The budget counts what carries this tag, once activated as a cost-allocation tag.
BUDGET_TAG_KEY = COST_SCOPE_TAG
BUDGET_STOP_PERCENT = 100
# AWS's own policy for budget actions that run the SSM stop document: EC2 stop/start
# only when called through SSM, and the SSM automation documents themselves. Kept in
# step with what the documents call by AWS, which a hand-written copy would not be.
# https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-action-role.html
BUDGET_ACTION_POLICY_ARN = (
    "arn:aws:iam::aws:policy/AWSBudgetsActions_RolePolicyForResourceAdministrationWithSSM"
)
# A new tag key can be activated only once Billing has seen it (up to a day after the
# first tagged resource exists): activation waits until Cost Explorer lists the key.
COST_TAG_LOOKBACK_DAYS = 30

# The on-box watchdog publishes its verdict once a minute, 1 busy / 0 idle
# (box/verdict_metric.py).
BUSY_VALUE = 1
METRIC_PERIOD_SECONDS = 60


def declare_daily_stop(
    name: str,
    config: StackConfig,
    instance_ids: pulumi.Output[list[str]],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.scheduler.Schedule:
    """Stop every box at `autoShutdownTime` in `autoShutdownTimeZone`, every day.

    `fab train --hours` moves the schedule's start date past a run's deadline (and adds
    a one-time stop at the deadline, ops/cloud/aws.py): `pulumi up` leaves it there.
    """
    child = pulumi.ResourceOptions(parent=parent)
    role = _service_role(f"{name}-daily-stop-role", "scheduler.amazonaws.com", tags, parent)
    account_id = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(parent=parent)
    ).account_id
    policy = aws.iam.RolePolicy(
        f"{name}-daily-stop-access",
        role=role.id,
        policy=pulumi.Output.all(account_id, instance_ids).apply(
            lambda found: json.dumps(
                access.stop_instances_policy(instance_arns(config.region, *found))
            )
        ),
        opts=child,
    )
    return aws.scheduler.Schedule(
        f"{name}-daily-stop",
        description=f"Stop the {name} boxes every day at {config.auto_shutdown_time}",
        schedule_expression=daily_cron(config.auto_shutdown_time),
        # Scheduler follows the zone's daylight-saving changes by itself.
        schedule_expression_timezone=config.auto_shutdown_time_zone,
        flexible_time_window={"mode": "OFF"},
        state="ENABLED",
        target={
            "arn": STOP_INSTANCES_TARGET,
            "role_arn": role.arn,
            "input": pulumi.Output.json_dumps({"InstanceIds": instance_ids}),
            "retry_policy": {"maximum_retry_attempts": STOP_RETRY_ATTEMPTS},
        },
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=[policy], ignore_changes=["startDate"]
        ),
    )


def _box(instance_ids: pulumi.Output[list[str]], index: int) -> pulumi.Output[str]:
    return instance_ids.apply(lambda ids: ids[index])


def instance_arns(region: str, account_id: str, instance_ids: list[str]) -> list[str]:
    """The ARNs of the boxes (whatever EC2 Fleet launched: their ids are known only then)."""
    return [f"arn:aws:ec2:{region}:{account_id}:instance/{i}" for i in instance_ids]


def _service_role(
    name: str, service: str, tags: dict[str, str], parent: pulumi.Resource
) -> aws.iam.Role:
    """A role only `service`, acting for this account, may assume."""
    account_id = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(parent=parent)
    ).account_id
    return aws.iam.Role(
        name,
        assume_role_policy=account_id.apply(
            lambda account: json.dumps(access.assume_role_policy(service, account))
        ),
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def daily_cron(hh_mm: str) -> str:
    """EventBridge Scheduler's six-field cron for every day at HH:MM."""
    hours, minutes = daily_time(hh_mm)
    return f"cron({minutes} {hours} * * ? *)"


def declare_budget(
    name: str, config: StackConfig, tags: dict[str, str], parent: pulumi.Resource
) -> aws.budgets.Budget:
    """A monthly USD budget for this stack's tagged resources, alerting `alertEmails`."""
    notifications = [
        {
            "comparison_operator": "GREATER_THAN",
            "notification_type": kind,
            "threshold": float(percent),
            "threshold_type": "PERCENTAGE",
            "subscriber_email_addresses": list(config.alert_emails),
        }
        for kind, percents in (
            ("ACTUAL", BUDGET_ACTUAL_PERCENTS),
            ("FORECASTED", BUDGET_FORECASTED_PERCENTS),
        )
        for percent in percents
    ]
    return aws.budgets.Budget(
        f"{name}-budget",
        budget_type="COST",
        time_unit="MONTHLY",
        limit_amount=f"{config.budget_amount:.2f}",
        limit_unit="USD",
        cost_filters=[
            {"name": "TagKeyValue", "values": [f"user:{BUDGET_TAG_KEY}${tags[BUDGET_TAG_KEY]}"]}
        ],
        notifications=notifications,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def declare_budget_stop(
    name: str,
    config: StackConfig,
    budget: aws.budgets.Budget,
    instance_ids: pulumi.Output[list[str]],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.budgets.BudgetAction:
    """At 100 % of the actual monthly spend, Budgets stops every box (SSM stop document).

    Stopped, not terminated: disks and checkpoints stay; `pulumi up` or the console
    starts the boxes again once the budget is raised.
    """
    child = pulumi.ResourceOptions(parent=parent)
    role = _service_role(f"{name}-budget-stop-role", "budgets.amazonaws.com", tags, parent)
    attachment = aws.iam.RolePolicyAttachment(
        f"{name}-budget-stop-access",
        role=role.name,
        policy_arn=BUDGET_ACTION_POLICY_ARN,
        opts=child,
    )
    return aws.budgets.BudgetAction(
        f"{name}-budget-stop",
        budget_name=budget.name,
        action_type="RUN_SSM_DOCUMENTS",
        approval_model="AUTOMATIC",
        notification_type="ACTUAL",
        action_threshold={
            "action_threshold_type": "PERCENTAGE",
            "action_threshold_value": float(BUDGET_STOP_PERCENT),
        },
        definition={
            "ssm_action_definition": {
                "action_sub_type": "STOP_EC2_INSTANCES",
                "instance_ids": instance_ids,
                "region": config.region,
            }
        },
        execution_role_arn=role.arn,
        subscribers=[
            {"address": email, "subscription_type": "EMAIL"} for email in config.alert_emails
        ],
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[attachment]),
    )


def activate_cost_scope_tag(
    name: str, parent: pulumi.Resource, today: datetime.date | None = None
) -> aws.costexplorer.CostAllocationTag | None:
    """Activate the budget's tag for cost allocation once Billing knows it; None before.

    Until it is active the budget sees nothing of this stack; the first stack of the
    project in an account waits up to a day for that. The activation is account-wide
    and shared by every stack of the project, so `pulumi destroy` leaves it active.
    """
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    start = today - datetime.timedelta(days=COST_TAG_LOOKBACK_DAYS)
    try:
        known = aws.costexplorer.get_tags(
            search_string=BUDGET_TAG_KEY,
            time_period={"start": start.isoformat(), "end": today.isoformat()},
            opts=pulumi.InvokeOptions(parent=parent),
        ).tags
    except Exception as error:  # Cost Explorer off, or no ce:GetTags: warn, never block
        pulumi.log.warn(
            f"could not ask Cost Explorer whether tag {BUDGET_TAG_KEY!r} is known ({error}); "
            "the budget counts nothing until it is activated as a cost-allocation tag",
            parent,
        )
        return None
    if BUDGET_TAG_KEY not in (known or []):
        pulumi.log.info(
            f"tag {BUDGET_TAG_KEY!r} is not in Cost Explorer yet (up to a day after the "
            "first tagged box); a later `pulumi up` activates it for the budget",
            parent,
        )
        return None
    return aws.costexplorer.CostAllocationTag(
        f"{name}-cost-scope-tag",
        tag_key=BUDGET_TAG_KEY,
        status="Active",
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True),
    )


def declare_idle_alarms(
    name: str,
    config: StackConfig,
    instance_ids: pulumi.Output[list[str]],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> list[aws.cloudwatch.MetricAlarm]:
    """One alarm per box: the watchdog said idle, or nothing, for `idleShutdownMinutes` -> stop.

    It agrees with the watchdog (SSH sessions, leases, a trainer's progress and the
    hung limit all count) because it reads the watchdog's verdict, not the GPU.
    """
    minutes = config.idle_shutdown_minutes
    return [
        aws.cloudwatch.MetricAlarm(
            f"{name}-idle-{index}",
            alarm_description=(
                f"Stop the box when its watchdog said idle, or nothing at all, for {minutes} "
                "minutes (the second guard behind the on-box watchdog)"
            ),
            namespace=contract.VERDICT_NAMESPACE,
            metric_name=contract.VERDICT_METRIC,
            dimensions={contract.VERDICT_DIMENSION: _box(instance_ids, index)},
            statistic="Maximum",
            # 60 s x up to 1440 periods stays within CloudWatch's one-day window.
            period=METRIC_PERIOD_SECONDS,
            evaluation_periods=minutes,
            datapoints_to_alarm=minutes,
            comparison_operator="LessThanThreshold",
            threshold=float(BUSY_VALUE),
            # A missing verdict is idle: a dead watchdog is a stop, not a silent forever.
            # While the box is stopped the alarm stays in ALARM; the box says busy for
            # its first minutes after a boot (the boot grace), which returns the alarm
            # to OK, so the next idle spell or silence is a fresh transition (actions
            # fire on transitions only) and stops the box again.
            treat_missing_data="breaching",
            alarm_actions=[f"arn:aws:automate:{config.region}:ec2:stop"],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for index in range(config.node_count)
    ]
