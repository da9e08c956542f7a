"""Which candidates (size x zone x market) are worth trying, before anything is declared.

What can be known is dropped here and kept with its reason (stack/placement.py has the
order and the record): a size a zone does not sell (AWS: EC2's instance type offerings
by zone, through the provider's invoke; Azure: the resource SKUs' zones and the
subscription's restrictions, over ARM with the provider's token), and a size whose
family has too little quota (`infra.quota_check`, the preflight's own rule). `pulumi
up` refuses only when nothing is left, with one line per candidate; the cloud's own
engine tries the rest in order (AWS: infra/aws/boxes.py; Azure: the VM's zone
placement). An Azure read that cannot be made is a warning: the VM then asks for the
first size in any zone, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from stack import placement
from stack.arm import ArmClient, sku_refusal, sku_zones
from stack.config import StackConfig
from stack.placement import Candidate, Tried


@dataclass(frozen=True)
class Plan:
    """Every candidate in the order tried, each with "" (to try) or why it was dropped."""

    every: tuple[Tried, ...]
    azure_zones: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Azure: size -> the zones Azure may pick from for it (the VM's `placement`)."""

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return tuple(t.candidate for t in self.every if not t.refusal)

    @property
    def dropped(self) -> tuple[Tried, ...]:
        return tuple(t for t in self.every if t.refusal)

    @property
    def zones(self) -> tuple[str, ...]:
        """The zones some candidate is in, in the order they are tried."""
        return tuple(dict.fromkeys(c.zone for c in self.candidates if c.zone))

    def zones_of(self, size: str) -> tuple[str, ...]:
        return tuple(c.zone for c in self.candidates if c.size == size and c.zone)

    @property
    def first(self) -> Candidate:
        return self.candidates[0]


def plan(config: StackConfig, quota_refusals: Mapping[tuple[str, str], str]) -> Plan:
    """The stack's candidates less what cannot work; RunError when none is left."""
    markets = placement.markets(config.spot, config.spot_fallback)
    sizes = config.candidate_sizes
    zones: dict[str, tuple[str, ...]] = {}
    if config.cloud == "aws":
        every = placement.candidates(sizes, config.zones, markets, _aws_selling(config))
    else:
        every, zones = _azure_candidates(config, markets)
    every = placement.with_quota(every, quota_refusals)
    if all(t.refusal for t in every):
        raise pulumi.RunError(placement.nothing_left(every, config.node_count))
    return Plan(tuple(every), zones)


def _aws_selling(config: StackConfig) -> dict[str, set[str]]:
    """Size -> the region's zones selling it (EC2's offerings, as this account sees them)."""
    import pulumi_aws as aws

    found = aws.ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": list(config.candidate_sizes)}],
    )
    selling: dict[str, set[str]] = {}
    for size, zone in zip(found.instance_types, found.locations, strict=True):
        selling.setdefault(size, set()).add(zone)
    if not selling:
        raise pulumi.RunError(
            f"no availability zone in {config.region} offers {', '.join(config.candidate_sizes)} "
            "to this account; pick another aws:region or vmSize (`fab plan` lists the options)"
        )
    return selling


def _azure_candidates(
    config: StackConfig, markets: tuple[str, ...]
) -> tuple[list[Tried], dict[str, tuple[str, ...]]]:
    """One candidate per size and market (Azure picks the zone within those that sell it,
    by size), less the sizes the subscription may not use in the region or its zones."""
    try:
        skus = _azure_skus(config)
    except Exception as error:  # reading SKUs must never be why `pulumi up` fails
        pulumi.log.warn(
            f"could not read the region's VM sizes before deploying ({error}); the boxes ask "
            "for vmSize in any zone, and `fab preflight` checks the sizes with your credentials"
        )
        return [Tried(Candidate(config.vm_size, "", markets[0]), "")], {}
    refusals = {
        size: sku_refusal(skus.get(size.lower()), config.region, config.zones)
        for size in config.candidate_sizes
    }
    every = [
        Tried(Candidate(size, "", market), refusals[size])
        for market in markets
        for size in config.candidate_sizes
    ]
    zones = {
        size: sku_zones(skus.get(size.lower()), config.zones) for size in config.candidate_sizes
    }
    return every, zones


def _azure_skus(config: StackConfig) -> dict[str, dict]:
    """The region's VM SKUs by lower-case name, as the deployer's subscription sees them."""
    from pulumi_azure_native import authorization

    token = authorization.get_client_token().token
    subscription = authorization.get_client_config().subscription_id
    answer = ArmClient.from_environment(token).get(
        f"/subscriptions/{subscription}/providers/Microsoft.Compute/skus",
        "skus",
        **{"$filter": f"location eq '{config.region}'"},
    )
    return {
        sku["name"].lower(): sku
        for sku in answer.get("value", [])
        if sku.get("resourceType") == "virtualMachines"
    }
