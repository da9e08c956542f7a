"""Which quota a stack's boxes draw on, and what to say when it is too small.

Pure rules over the VM catalog: no cloud SDK, no I/O. `fab preflight` feeds them the
numbers it reads from the clouds' APIs, and the Pulumi program feeds them the one
quota it can read cheaply before declaring anything, so both say the same thing.

New accounts often have 0 vCPUs of GPU quota on both clouds; a quota shortfall is
the most common reason a first `pulumi up` fails after other resources are billing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stack.catalog import VmSize

# AWS Service Quotas codes (service code `ec2`); the values are vCPUs, except the
# Elastic IP quota, which counts addresses.
# https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html
AWS_ON_DEMAND_QUOTAS = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
}
AWS_SPOT_QUOTAS = {
    "p": ("L-7212CCBC", "All P Spot Instance Requests"),
    "g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
}
AWS_ELASTIC_IP_QUOTA = ("L-0263D0A3", "EC2-VPC Elastic IPs")
AWS_DEFAULT_ELASTIC_IPS = 5

# Azure compute usage names (`GET .../locations/{region}/usages`): one per VM family,
# plus the regional total and the separate Spot/low-priority pool.
AZURE_FAMILIES = {
    "Standard_NC4as_T4_v3": "standardNCASv3_T4Family",
    "Standard_NC8as_T4_v3": "standardNCASv3_T4Family",
    "Standard_NC16as_T4_v3": "standardNCASv3_T4Family",
    "Standard_NC64as_T4_v3": "standardNCASv3_T4Family",
    "Standard_NC24ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC48ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC96ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC40ads_H100_v5": "standardNCadsH100v5Family",
    "Standard_NC80adis_H100_v5": "standardNCadsH100v5Family",
    "Standard_ND96asr_v4": "standardNDASv4_A100Family",
}
AZURE_REGIONAL_USAGE = "cores"
AZURE_SPOT_USAGE = "lowPriorityCores"
AZURE_QUOTA_PORTAL = (
    "https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas"
)


@dataclass(frozen=True)
class Quota:
    """One limit the stack draws on: what it is called, in which unit, and how to raise it."""

    name: str
    """The cloud's own name: a Service Quotas code or an Azure usage name."""
    title: str
    unit: str
    fix: str
    """How to raise it (a command or a link) with `{desired}` for the limit needed."""


def vcpus_needed(size: VmSize, node_count: int) -> int:
    return size.vcpus * node_count


def aws_gpu_quota(size: VmSize, spot: bool, region: str, node_count: int) -> Quota:
    """The vCPU quota AWS counts `node_count` boxes of `size` against."""
    family = size.name[0].lower()  # p3/p4d/p5 -> P; g5/g6 -> G (and VT)
    code, title = (AWS_SPOT_QUOTAS if spot else AWS_ON_DEMAND_QUOTAS)[family]
    return Quota(code, title, "vCPUs", _aws_fix(code, region))


def aws_elastic_ip_quota(region: str) -> Quota:
    code, title = AWS_ELASTIC_IP_QUOTA
    return Quota(code, title, "addresses", _aws_fix(code, region))


def _aws_fix(code: str, region: str) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 "
        f"--quota-code {code} --desired-value {{desired}} --region {region} "
        f"(or https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/{code})"
    )


def azure_gpu_quotas(size: VmSize, spot: bool, region: str, family: str = "") -> list[Quota]:
    """The usages Azure counts the boxes against: the Spot pool, or family + regional total.

    `family` is the SKU API's family name when known; the table covers the catalog.
    """
    if spot:
        names = [(AZURE_SPOT_USAGE, "Total Regional Spot vCPUs")]
    else:
        family = family or AZURE_FAMILIES[size.name]
        names = [(family, f"{family} vCPUs"), (AZURE_REGIONAL_USAGE, "Total Regional vCPUs")]
    return [Quota(name, title, "vCPUs", _azure_fix(name, region)) for name, title in names]


def _azure_fix(name: str, region: str) -> str:
    scope = f"/subscriptions/<subscription>/providers/Microsoft.Compute/locations/{region}"
    return (
        f"az quota update --resource-name {name} --scope {scope} --limit-object "
        f"value={{desired}} --resource-type dedicated (az extension add --name quota), "
        f"or {AZURE_QUOTA_PORTAL}"
    )


def shortfall(quota: Quota, limit: float, used: float, need: int) -> str | None:
    """One line when `need` more does not fit under `limit` with `used` taken, else None."""
    if used + need <= limit:
        return None
    taken = f" with {used:g} in use" if used else ""
    fix = quota.fix.format(desired=math.ceil(used + need))
    return (
        f"quota {quota.title!r} ({quota.name}) is {limit:g} {quota.unit}{taken}; this stack "
        f"needs {need} more; raise it: {fix}"
    )
