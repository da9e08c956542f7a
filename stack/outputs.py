"""The stack's outputs by name: what `pulumi up` exports and `fab` reads back (from the
stack, or from a target file that holds the same keys). The names are a public contract
(ARCHITECTURE.md, "`fab` target file"); the guard settings' outputs are their stack keys
(`box.watchdog_config.GUARD_SETTINGS`)."""

from __future__ import annotations


class StackOutput:
    """Each output's name."""

    CLOUD = "cloud"
    HOSTS = "hosts"
    PRIVATE_HOSTS = "privateHosts"
    BOX_IDS = "boxIds"
    REGION = "region"
    SSH_USER = "sshUser"
    STORAGE_URI = "storageUri"
    REGISTRY = "registry"
    IMAGE_REPOSITORY = "imageRepository"
    VM_SIZE = "vmSize"
    GPU_COUNT = "gpuCount"
    HOURLY_PRICE_USD = "hourlyPriceUsd"
    SPOT = "spot"
    MAX_RUN_HOURS = "maxRunHours"
    AUTO_RECOVER = "autoRecover"
    AMI_ID = "amiId"
    """AWS only: the image the boxes booted."""
    DAILY_STOP_SCHEDULES = "dailyStopSchedules"
    """Azure only: each VM's daily-stop schedule id, rank order."""
    NOTIFY_TOPIC_ARN = "notifyTopicArn"
    """AWS only: the SNS topic a box tells a run's end to (alertEmails subscribed)."""
    NOTIFY_WEBHOOK = "notifyWebhook"
    """The stack's notifyWebhook, when set (a secret output: the URL is a credential)."""
    PLACEMENT = "placement"
    """`{"size", "zone", "market"}` the boxes were launched on (stack/placement.py)."""
    PLACEMENT_TRIED = "placementTried"
    """Every candidate in the order tried, `{"size", "zone", "market", "refusal"}`;
    "" for the one taken."""
    CAPACITY_WAIT_MINUTES = "capacityWaitMinutes"
    """How long `fab start` retries the same size before it resizes the boxes."""


NOTIFY_OUTPUTS = {
    StackOutput.NOTIFY_WEBHOOK: "notify_webhook",
    StackOutput.NOTIFY_TOPIC_ARN: "notify_topic_arn",
}
"""The outputs that carry where a box tells a run's end, by their watchdog.json keys
(box/notify.py): what `fab box-update` renders a box's settings with."""
