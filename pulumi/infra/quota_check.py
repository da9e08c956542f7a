"""The cheap part of `fab preflight` that `pulumi up` runs before declaring anything.

New accounts often have no GPU quota at all; found out at instance creation, the
network, storage and registry are already there and billing. One read through the
deployer's own credentials answers it first: AWS Service Quotas through the provider's
invoke, Azure's compute usages through ARM with the provider's own token. The rule and
the message (with the request command) are `stack.quota`'s, the same as `fab preflight`.

Boxes already running are not counted (they are this stack's on a later `pulumi up`);
`fab preflight` counts what else is in use. A check that cannot be made (the deployer
may not read quotas, ARM unreachable) is a warning, never a refusal.
"""

from __future__ import annotations

import pulumi

from stack import quota
from stack.config import StackConfig


def quota_problems(config: StackConfig) -> list[str]:
    """One line per quota too small for `nodeCount` boxes of `vmSize`; [] when they fit."""
    try:
        if config.cloud == "aws":
            return _aws(config)
        return _azure(config)
    except Exception as error:  # reading a quota must never be why `pulumi up` fails
        pulumi.log.warn(
            f"could not read the GPU quota before deploying ({error}); "
            "`fab preflight` checks it with your own credentials"
        )
        return []


def _aws(config: StackConfig) -> list[str]:
    import pulumi_aws as aws

    wanted = quota.aws_gpu_quota(config.size, config.spot, config.region, config.node_count)
    limit = aws.servicequotas.get_service_quota(service_code="ec2", quota_code=wanted.name).value
    need = quota.vcpus_needed(config.size, config.node_count)
    line = quota.shortfall(wanted, limit, 0, need)
    return [line] if line else []


def _azure(config: StackConfig) -> list[str]:
    from pulumi_azure_native import authorization

    from stack.arm import ArmClient, quota_problems

    token = authorization.get_client_token().token
    subscription = authorization.get_client_config().subscription_id
    return quota_problems(ArmClient.from_environment(token), subscription, config, in_use=False)
