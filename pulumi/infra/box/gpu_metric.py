"""GPU utilisation as a CloudWatch metric, for the idle alarm of the AWS program.

Published with the `aws` CLI under the instance role. The CLI (on the Deep Learning
AMI; setup-box.sh installs it where an AWS image lacks it) signs requests and
refreshes the role's credentials itself; a hand-rolled SigV4 signer here would be
more code to trust for one call a minute.
Where the CLI is missing the metric is skipped with a log line: the watchdog's
own idle stop does not depend on it. Standard library only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import instance_metadata
from watchdog_config import WatchdogConfig

AWS_CLI_TIMEOUT_SECONDS = 30


def publish_gpu_utilization(
    config: WatchdogConfig, utilization: list[int] | None, log: Callable[[str], None]
) -> None:
    """Put the busiest GPU's utilisation (percent) for this instance; AWS only."""
    if config.cloud != "aws" or utilization is None:
        return
    try:
        instance_id, region = instance_metadata.aws_metadata(
            config, "instance-id", "placement/region"
        )
    except instance_metadata.MetadataError as error:
        log(f"WARNING: GPU metric not published: {error}")
        return
    command = [
        config.aws_command,
        "cloudwatch",
        "put-metric-data",
        "--region",
        region,
        "--namespace",
        config.cloudwatch_namespace,
        "--metric-name",
        config.cloudwatch_metric,
        "--dimensions",
        f"InstanceId={instance_id}",
        "--unit",
        "Percent",
        "--value",
        str(max(utilization or [0])),
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=AWS_CLI_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        log(f"WARNING: GPU metric not published: {error}")
        return
    if done.returncode != 0:
        stderr = done.stderr.strip()[:300]
        log(f"WARNING: GPU metric not published: exit {done.returncode}: {stderr}")
