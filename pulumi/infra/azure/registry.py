"""The Azure stack's image registry: a Basic ACR, pulls by managed identity only."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import containerregistry, resources

from infra.azure.names import alnum

IMAGE_NAME = "glucose-trainer"


def declare_registry(
    name: str, group: resources.ResourceGroup, tags: dict[str, str], parent: pulumi.Resource
) -> containerregistry.Registry:
    return containerregistry.Registry(
        f"{alnum(name)[:30]}acr",  # global name, letters and digits only
        resource_group_name=group.name,
        location=group.location,
        sku={"name": "Basic"},
        admin_user_enabled=False,  # pulls by managed identity, pushes by `az login`
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
