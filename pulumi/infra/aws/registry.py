"""The AWS stack's image registry: one ECR repository, scanned on push."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws


def declare_registry(
    name: str, tags: dict[str, str], parent: pulumi.Resource
) -> aws.ecr.Repository:
    return aws.ecr.Repository(
        f"{name}-trainer",
        image_scanning_configuration={"scan_on_push": True},
        # `fab push` tags by git revision and may push a rebuilt revision again, which
        # IMMUTABLE would refuse. Images are rebuilt from the repo, so they go with
        # the stack (force_delete) instead of blocking `pulumi destroy`.
        image_tag_mutability="MUTABLE",
        force_delete=True,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
