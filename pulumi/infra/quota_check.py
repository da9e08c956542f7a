"""The cheap part of `fab preflight` that `pulumi up` runs before declaring anything.

New accounts often have no GPU quota at all; found out at instance creation, the
network, storage and registry are already there and billing. One read through the
deployer's own credentials answers it first: AWS Service Quotas through the provider's
invoke, Azure's compute usages through ARM with the provider's own token. The rule and
the message (with the request command) are `stack.quota`'s, the same as `fab preflight`.
Each candidate size and market is asked about (`fallbackVmSizes` may draw on another
family's quota): one that does not fit is dropped with the quota's line, and `pulumi
up` refuses only when no candidate is left (infra/placement.py).

Boxes already running are not counted (they are this stack's on a later `pulumi up`);
`fab preflight` counts what else is in use. A check that cannot be made (the deployer
may not read quotas, ARM unreachable) is a warning, never a refusal.
"""

from __future__ import annotations

from types import SimpleNamespace

import pulumi

from stack import catalog, placement, quota
from stack.config import StackConfig

Pair = tuple[str, str]
"""(size, market) of a candidate."""


def quota_refusals(config: StackConfig) -> dict[Pair, str]:
    """Each candidate (size, market) whose quota is too small for `nodeCount` boxes, with
    the quota's line; {} when they all fit (or the quotas cannot be read)."""
    pairs = [
        (size, market)
        for market in placement.markets(config.spot, config.spot_fallback)
        for size in config.candidate_sizes
    ]
    try:
        ask = _aws if config.cloud == "aws" else _azure(config)
        return {pair: line for pair in pairs if (line := ask(config, *pair))}
    except Exception as error:  # reading a quota must never be why `pulumi up` fails
        pulumi.log.warn(
            f"could not read the GPU quota before deploying ({error}); "
            "`fab preflight` checks it with your own credentials"
        )
        return {}


def _aws(config: StackConfig, size_name: str, market: str) -> str | None:
    import pulumi_aws as aws

    size = catalog.lookup(size_name, "aws")
    spot = market == placement.SPOT
    wanted = quota.aws_gpu_quota(size, spot, config.region, config.node_count)
    limit = aws.servicequotas.get_service_quota(service_code="ec2", quota_code=wanted.name).value
    return quota.shortfall(wanted, limit, 0, quota.vcpus_needed(size, config.node_count))


def _azure(config: StackConfig):
    """A question for each pair, over one ARM client with the provider's token."""
    from pulumi_azure_native import authorization

    from stack.arm import ArmClient, quota_problems

    arm = ArmClient.from_environment(authorization.get_client_token().token)
    subscription = authorization.get_client_config().subscription_id

    def ask(_config: StackConfig, size_name: str, market: str) -> str | None:
        boxes = SimpleNamespace(
            region=config.region,
            size=catalog.lookup(size_name, "azure"),
            node_count=config.node_count,
            spot=market == placement.SPOT,
        )
        lines = quota_problems(arm, subscription, boxes, in_use=False)
        return "; ".join(lines) or None

    return ask
