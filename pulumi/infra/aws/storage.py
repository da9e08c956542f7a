"""The AWS stack's storage: one private, encrypted, versioned S3 bucket.

Lifecycle rules delete the scratch under tmp/ (stack.storage_layout), abort the parts of
multipart uploads a preemption cut off, and age out old versions. Kept through `pulumi
destroy` with keepStorageOnDestroy, with its settings: a retained bucket whose
public-access block was deleted would be one policy away from public.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stack import storage_layout
from stack.box_packing import Programs
from stack.config import StackConfig

INCOMPLETE_UPLOAD_DAYS = 1
NONCURRENT_VERSION_DAYS = 14


def declare_storage(name: str, config: StackConfig, parent: pulumi.Resource) -> aws.s3.Bucket:
    keep = config.keep_storage_on_destroy
    child = pulumi.ResourceOptions(parent=parent, retain_on_delete=keep)
    bucket = aws.s3.Bucket(
        f"{name}-storage",
        # Deleting a bucket that still holds checkpoints needs force_destroy; a kept
        # bucket is never deleted by Pulumi, so it never needs it.
        force_destroy=not keep,
        tags=config.storage_tags,
        opts=child,
    )
    aws.s3.BucketPublicAccessBlock(
        f"{name}-storage-private",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=child,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-storage-encryption",
        bucket=bucket.id,
        rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}],
        opts=child,
    )
    aws.s3.BucketVersioning(
        f"{name}-storage-versioning",
        bucket=bucket.id,
        versioning_configuration={"status": "Enabled"},
        opts=child,
    )
    aws.s3.BucketLifecycleConfiguration(
        f"{name}-storage-lifecycle", bucket=bucket.id, rules=_lifecycle_rules(), opts=child
    )
    return bucket


def declare_box_programs(
    name: str,
    bucket: aws.s3.Bucket,
    programs: Programs,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.s3.BucketObjectv2:
    """The box programs' archive, which a new box fetches with its instance role. Its key
    names its sha256, so new programs are a new object; an old one stays (retained) for
    the boxes whose user data pins it, and goes with the bucket."""
    return aws.s3.BucketObjectv2(
        f"{name}-box-programs",
        bucket=bucket.id,
        key=storage_layout.box_programs_key(programs.sha256),
        content=programs.text,
        content_type="application/x-tar",
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True),
    )


def _lifecycle_rules() -> list[dict]:
    return [
        {
            "id": "expire-stale-temporaries",
            "status": "Enabled",
            "filter": {"prefix": f"{storage_layout.TMP_PREFIX}/"},
            "expiration": {"days": storage_layout.STALE_TMP_DAYS},
        },
        {
            # A preempted multipart upload of a checkpoint leaves invisible, billed parts.
            "id": "abort-incomplete-multipart-uploads",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "abort_incomplete_multipart_upload": {"days_after_initiation": INCOMPLETE_UPLOAD_DAYS},
        },
        {
            # Versioning protects against a bad overwrite; old checkpoint versions then age out.
            "id": "expire-noncurrent-versions",
            "status": "Enabled",
            "filter": {"prefix": ""},
            "noncurrent_version_expiration": {"noncurrent_days": NONCURRENT_VERSION_DAYS},
        },
    ]
