"""The watchdog's verdict as a CloudWatch metric, for the AWS idle alarm.

`GlucoseTraining/Busy` (1 busy, 0 idle; dimension InstanceId) every minute. The
alarm (pulumi/infra/aws/guard_rails.py) stops the instance after
`idleShutdownMinutes` of 0s *or of silence*: missing data counts as idle, so a
dead watchdog is a stop. While the box is stopped the alarm sits in ALARM (silence),
and actions fire only on transitions; so for its first minutes after a boot the
box says busy, the alarm returns to OK, and the next idle spell or silence is a
fresh transition. Published with the `aws` CLI under the instance role: it signs
requests and refreshes the role's credentials itself. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable

from box import contract, instance_metadata
from box.bounded_command import CommandTimeout, run_bounded
from box.watchdog_config import WatchdogConfig

AWS_CLI_TIMEOUT_SECONDS = 20
BOOT_GRACE_SECONDS = 3 * 60
# IMDSv2 token, instance id, region.
IMDS_REQUESTS = 3


def verdict_value(decision: str, *, now: float, boot_time: float | None) -> int:
    """1 for busy (or a box that booted moments ago), 0 for idle."""
    booting = boot_time is not None and 0 <= now - boot_time < BOOT_GRACE_SECONDS
    return 1 if decision == "busy" or booting else 0


def publish_verdict(config: WatchdogConfig, value: int, log: Callable[[str], None]) -> None:
    """Put the verdict for this instance; AWS only. Failures are logged, never raised."""
    if config.cloud != "aws":
        return
    try:
        instance_id, region = instance_metadata.aws_metadata(
            config, "instance-id", "placement/region"
        )
    except instance_metadata.MetadataError as error:
        log(f"WARNING: verdict not published: {error}")
        return
    command = [
        config.aws_command, "cloudwatch", "put-metric-data",
        "--region", region,
        "--namespace", config.cloudwatch_namespace,
        "--metric-name", config.cloudwatch_metric,
        "--dimensions", f"{contract.VERDICT_DIMENSION}={instance_id}",
        "--unit", "None",
        "--value", str(value),
    ]  # fmt: skip
    try:
        done = run_bounded(command, AWS_CLI_TIMEOUT_SECONDS)
    except (OSError, CommandTimeout) as error:
        log(f"WARNING: verdict not published: {error}")
        return
    if done.returncode != 0:
        stderr = done.stderr.strip()[:300]
        log(f"WARNING: verdict not published: exit {done.returncode}: {stderr}")
