"""The glucose-training Pulumi program: read the stack config, build the boxes, export.

Config is validated before any resource is declared; a bad stack file ends the run
with one line per problem and no traceback. The cloud module is imported only for the
cloud in use, so an Azure stack never needs the AWS provider and vice versa.
"""

from __future__ import annotations

import pulumi

from infra.config import ConfigError, StackConfig, load_stack_config
from infra.training_box import TrainingBox

COMPONENT_NAME = "glucose"


def build(config: StackConfig) -> TrainingBox:
    """The training box component for the configured cloud."""
    if config.cloud == "azure":
        from infra.azure import AzureTrainingBox

        return AzureTrainingBox(COMPONENT_NAME, config)
    from infra.aws import AwsTrainingBox

    return AwsTrainingBox(COMPONENT_NAME, config)


def main() -> None:
    try:
        config = load_stack_config()
    except ConfigError as exc:
        # RunError: Pulumi prints the message alone, without the program's stack trace.
        raise pulumi.RunError(str(exc)) from None
    box = build(config)
    size = config.size
    pulumi.export("cloud", config.cloud)
    pulumi.export("hosts", box.hosts)
    pulumi.export("sshUser", box.ssh_user)
    pulumi.export("storageUri", box.storage_uri)
    pulumi.export("registry", box.registry)
    pulumi.export("imageRepository", box.image_repository)
    pulumi.export("vmSize", size.name)
    pulumi.export("gpuCount", size.gpu_count)
    pulumi.export("hourlyPriceUsd", config.hourly_price_usd)
    pulumi.export("spot", config.spot)


main()
