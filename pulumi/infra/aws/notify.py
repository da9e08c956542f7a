"""Told when a run ends, on AWS: an SNS topic that mails the stack's alertEmails.

The box publishes one message per run end (box/notify.py) with its instance role, which
may publish to this topic and no other (`publish_policy`). Each address gets AWS's
confirmation mail first: until its owner clicks it, SNS sends that address nothing.
The topic's ARN reaches the box in its settings (watchdog.json's `notify_topic_arn`)
and `fab box-update` through the stack output `notifyTopicArn`.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.access import POLICY_VERSION
from stack.config import StackConfig


def publish_policy(topic_arn: str) -> dict[str, Any]:
    """What the box's role may do to tell a run's end: publish to this topic alone."""
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "TellRunEnds",
                "Effect": "Allow",
                "Action": ["sns:Publish"],
                "Resource": [topic_arn],
            }
        ],
    }


def declare_notify(
    name: str,
    config: StackConfig,
    role_name: pulumi.Input[str],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.sns.Topic:
    """The topic, one e-mail subscription per alertEmails address, and the role's right
    to publish to it."""
    child = pulumi.ResourceOptions(parent=parent)
    topic = aws.sns.Topic(f"{name}-run-ends", tags=tags, opts=child)
    for index, email in enumerate(config.alert_emails):
        aws.sns.TopicSubscription(
            f"{name}-run-ends-mail-{index}",
            topic=topic.arn,
            protocol="email",
            endpoint=email,
            opts=child,
        )
    aws.iam.RolePolicy(
        f"{name}-box-notify",
        role=role_name,
        policy=topic.arn.apply(lambda arn: json.dumps(publish_policy(arn))),
        opts=child,
    )
    return topic
