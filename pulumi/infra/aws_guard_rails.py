"""Guard rails 2 and 3 of DESIGN.md for AWS, plus the idle alarm behind the watchdog.

- a daily hard stop: an EventBridge Scheduler schedule calling the universal target
  `ec2:stopInstances` through a role allowed only that, on these instances;
- a monthly cost budget mailing ACTUAL 50/80/100 % and FORECASTED 100 %;
- per box, a CloudWatch alarm on the watchdog's verdict whose action stops the
  instance (`arn:aws:automate:<region>:ec2:stop` needs no role of ours).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra import aws_iam
from infra.config import StackConfig

STOP_INSTANCES_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
STOP_RETRY_ATTEMPTS = 5

BUDGET_ACTUAL_PERCENTS = (50, 80, 100)
BUDGET_FORECASTED_PERCENTS = (100,)
# The budget counts what carries this tag, once activated as a cost-allocation tag.
BUDGET_TAG_KEY = "stack"

# The on-box watchdog publishes its verdict once a minute, 1 busy / 0 idle
# (pulumi/infra/box/verdict_metric.py).
METRIC_NAMESPACE = "GlucoseTraining"
VERDICT_METRIC = "Busy"
VERDICT_METRIC_DIMENSION = "InstanceId"
BUSY_VALUE = 1
METRIC_PERIOD_SECONDS = 60


def declare_daily_stop(
    name: str,
    config: StackConfig,
    instances: list[aws.ec2.Instance],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.scheduler.Schedule:
    """Stop every box at `autoShutdownTime` in `autoShutdownTimeZone`, every day."""
    child = pulumi.ResourceOptions(parent=parent)
    account_id = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(parent=parent)
    ).account_id
    role = aws.iam.Role(
        f"{name}-daily-stop-role",
        assume_role_policy=account_id.apply(
            lambda account: json.dumps(
                aws_iam.assume_role_policy("scheduler.amazonaws.com", account)
            )
        ),
        tags=tags,
        opts=child,
    )
    policy = aws.iam.RolePolicy(
        f"{name}-daily-stop-access",
        role=role.id,
        policy=pulumi.Output.all(*[i.arn for i in instances]).apply(
            lambda arns: json.dumps(aws_iam.stop_instances_policy(list(arns)))
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
            "input": pulumi.Output.json_dumps({"InstanceIds": [i.id for i in instances]}),
            "retry_policy": {"maximum_retry_attempts": STOP_RETRY_ATTEMPTS},
        },
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy]),
    )


def daily_cron(hh_mm: str) -> str:
    """EventBridge Scheduler's six-field cron for every day at HH:MM."""
    hours, minutes = (int(part) for part in hh_mm.split(":"))
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


def declare_idle_alarms(
    name: str,
    config: StackConfig,
    instances: list[aws.ec2.Instance],
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
            namespace=METRIC_NAMESPACE,
            metric_name=VERDICT_METRIC,
            dimensions={VERDICT_METRIC_DIMENSION: instance.id},
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
        for index, instance in enumerate(instances)
    ]
