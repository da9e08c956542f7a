"""The glucose-training Pulumi program: read the stack config, build the boxes, export.

Config is validated before any resource is declared, and so is the account's GPU
quota for the boxes (the cheap part of `fab preflight`); a bad stack file or too
small a quota ends the run with one line per problem and no traceback. The cloud
module is imported only for the cloud in use, so an Azure stack never needs the AWS
provider and vice versa.
"""

from __future__ import annotations

import pulumi

from box.watchdog_config import GUARD_SETTINGS
from infra.placement import Plan, plan
from infra.quota_check import quota_refusals
from infra.stack_config import load_stack_config
from infra.training_box import TrainingBox
from stack.cloud_init import box_guard_settings
from stack.config import ConfigError, StackConfig
from stack.outputs import StackOutput
from stack.placement import SPOT, hourly_price_usd

COMPONENT_NAME = "glucose"


def build(config: StackConfig, candidates: Plan) -> TrainingBox:
    """The training box component for the configured cloud."""
    if config.cloud == "azure":
        from infra.azure.training_box import AzureTrainingBox

        return AzureTrainingBox(COMPONENT_NAME, config, candidates)
    from infra.aws.training_box import AwsTrainingBox

    return AwsTrainingBox(COMPONENT_NAME, config, candidates)


def main() -> None:
    try:
        config = load_stack_config()
    except ConfigError as exc:
        # RunError: Pulumi prints the message alone, without the program's stack trace.
        raise pulumi.RunError(str(exc)) from None
    # Candidates without quota or not sold where asked are dropped first; RunError
    # naming each when none is left.
    box = build(config, plan(config, quota_refusals(config)))
    pulumi.export(StackOutput.CLOUD, config.cloud)
    pulumi.export(StackOutput.HOSTS, box.hosts)
    pulumi.export(StackOutput.PRIVATE_HOSTS, box.private_hosts)
    pulumi.export(StackOutput.BOX_IDS, box.box_ids)
    pulumi.export(StackOutput.REGION, config.region)
    pulumi.export(StackOutput.SSH_USER, box.ssh_user)
    pulumi.export(StackOutput.STORAGE_URI, box.storage_uri)
    pulumi.export(StackOutput.REGISTRY, box.registry)
    pulumi.export(StackOutput.IMAGE_REPOSITORY, box.image_repository)
    # The size, zone and market taken (a fallback's, when the first choice had no room).
    pulumi.export(StackOutput.VM_SIZE, box.placement.apply(lambda p: p["size"]))
    pulumi.export(StackOutput.GPU_COUNT, config.size.gpu_count)  # the same for every candidate
    price = box.placement.apply(lambda taken: hourly_price_usd(config.cloud, taken))
    pulumi.export(StackOutput.HOURLY_PRICE_USD, price)
    pulumi.export(StackOutput.SPOT, box.placement.apply(lambda p: p["market"] == SPOT))
    pulumi.export(StackOutput.PLACEMENT, box.placement)
    pulumi.export(StackOutput.PLACEMENT_TRIED, box.placement_tried)
    pulumi.export(StackOutput.CAPACITY_WAIT_MINUTES, config.capacity_wait_minutes)
    pulumi.export(StackOutput.MAX_RUN_HOURS, config.max_run_hours)
    pulumi.export(StackOutput.AUTO_RECOVER, config.recovers)
    # What `fab box-update` renders the box's settings from: all of cloud-init's.
    guard = box_guard_settings(config)
    for setting in GUARD_SETTINGS:
        pulumi.export(setting.stack_key, guard[setting.box_key])
    if config.notify_webhook:  # a secret: whoever has the URL may post to the channel
        pulumi.export(StackOutput.NOTIFY_WEBHOOK, pulumi.Output.secret(config.notify_webhook))
    for key, value in box.cloud_outputs.items():
        pulumi.export(key, value)


main()
