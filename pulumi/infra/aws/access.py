"""Who may do what on AWS: the boxes' instance role, and the IAM documents behind it.

The documents are pure functions of ARNs and names (plain dicts), so the
least-privilege rules read in one place and the tests check them without a Pulumi
engine. The only `"Resource": "*"` statements
are the two AWS allows nothing narrower for: `ecr:GetAuthorizationToken` (docs:
https://docs.aws.amazon.com/AmazonECR/latest/userguide/registry_auth.html) and
`cloudwatch:PutMetricData`, which is pinned to one namespace by a condition instead
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from box import contract

POLICY_VERSION = "2012-10-17"

# What the trainer does with its bucket: list, read, write, overwrite LATEST,
# delete old checkpoints, and clean up after an interrupted multipart upload.
BUCKET_LEVEL_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads")
OBJECT_LEVEL_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
ECR_PULL_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
)


def assume_role_policy(service: str, source_account: str | None = None) -> dict[str, Any]:
    """Trust `service` (e.g. ec2.amazonaws.com); with `source_account`, only on behalf of
    that account, which stops another account's schedule from borrowing the role
    (https://docs.aws.amazon.com/scheduler/latest/UserGuide/cross-service-confused-deputy-prevention.html)."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if source_account is not None:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": source_account}}
    return {"Version": POLICY_VERSION, "Statement": [statement]}


def box_policy(bucket_arn: str, repository_arn: str, metric_namespace: str) -> dict[str, Any]:
    """What the box's instance role may do: this bucket, this repository, one metric namespace."""
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "ListThisBucket",
                "Effect": "Allow",
                "Action": list(BUCKET_LEVEL_ACTIONS),
                "Resource": [bucket_arn],
            },
            {
                "Sid": "ReadWriteThisBucket",
                "Effect": "Allow",
                "Action": list(OBJECT_LEVEL_ACTIONS),
                "Resource": [f"{bucket_arn}/*"],
            },
            {
                "Sid": "PullThisRepository",
                "Effect": "Allow",
                "Action": list(ECR_PULL_ACTIONS),
                "Resource": [repository_arn],
            },
            {
                # ECR has no resource-level permission for the login token.
                "Sid": "RegistryLogin",
                "Effect": "Allow",
                "Action": ["ecr:GetAuthorizationToken"],
                "Resource": "*",
            },
            {
                # PutMetricData has no resource ARN; the namespace condition is the fence.
                "Sid": "PublishGpuUtilisation",
                "Effect": "Allow",
                "Action": ["cloudwatch:PutMetricData"],
                "Resource": "*",
                "Condition": {"StringEquals": {"cloudwatch:namespace": metric_namespace}},
            },
        ],
    }


def stop_instances_policy(instance_arns: list[str]) -> dict[str, Any]:
    """The daily-stop schedule's role: stop these instances, nothing else."""
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "StopTheseInstances",
                "Effect": "Allow",
                "Action": ["ec2:StopInstances"],
                "Resource": list(instance_arns),
            }
        ],
    }


def declare_access(
    name: str,
    bucket: aws.s3.Bucket,
    repository: aws.ecr.Repository,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.iam.InstanceProfile:
    """The boxes' instance profile: a role allowed `box_policy` and nothing else."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        f"{name}-box-role",
        assume_role_policy=json.dumps(assume_role_policy("ec2.amazonaws.com")),
        tags=tags,
        opts=child,
    )
    aws.iam.RolePolicy(
        f"{name}-box-access",
        role=role.id,
        policy=pulumi.Output.all(bucket.arn, repository.arn).apply(
            lambda arns: json.dumps(box_policy(arns[0], arns[1], contract.VERDICT_NAMESPACE))
        ),
        opts=child,
    )
    return aws.iam.InstanceProfile(f"{name}-box-profile", role=role.name, tags=tags, opts=child)
