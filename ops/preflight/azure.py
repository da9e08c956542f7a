"""`fab preflight` on Azure: will this stack's `pulumi up` succeed for this subscription?

Read-only ARM calls with the deployer's own token: are the resource providers the
program needs registered (a fresh subscription has few), does the region offer the
size to this subscription, do the family, regional and Spot vCPU quotas leave room,
may the deployer create resources and role assignments, and can the subscription hold
a Cost Management budget. Plain HTTPS through the standard library; the caller brings
the token (`ops.azure_login`).

`GLUCOSE_ARM_ENDPOINT` moves the ARM endpoint (a sovereign cloud, or the tests' fake).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from ops.preflight.findings import Findings
from stack.arm import ArmClient, ArmError, quota_problems

# Every resource provider the program declares something of. Fresh subscriptions have
# only a few registered, and the first resource of an unregistered one fails.
REQUIRED_PROVIDERS = (
    "Microsoft.Compute",
    "Microsoft.Network",
    "Microsoft.Storage",
    "Microsoft.ContainerRegistry",
    "Microsoft.DevTestLab",
    "Microsoft.Consumption",
    "Microsoft.Logic",
    "Microsoft.Insights",
)
# What `pulumi up` does as the deployer. Role assignments need Owner or User Access
# Administrator on top of Contributor.
REQUIRED_ACTIONS = (
    "Microsoft.Resources/subscriptions/resourceGroups/write",
    "Microsoft.Compute/virtualMachines/write",
    "Microsoft.Network/publicIPAddresses/write",
    "Microsoft.Storage/storageAccounts/write",
    "Microsoft.ContainerRegistry/registries/write",
    "Microsoft.DevTestLab/schedules/write",
    "Microsoft.Consumption/budgets/write",
    "Microsoft.Logic/workflows/write",
    "Microsoft.Insights/actionGroups/write",
    "Microsoft.Insights/activityLogAlerts/write",
    "Microsoft.Authorization/roleAssignments/write",
)


def check(config: Any, arm: ArmClient, subscription: str | None) -> Findings:
    """Every problem a `pulumi up` of `config` (an infra StackConfig) would meet."""
    findings = Findings()
    try:
        subscription = subscription or _only_subscription(arm)
    except ArmError as error:
        findings.problem(f"Azure credentials do not work ({error})", "run `az login`, then retry")
        return findings
    if subscription is None:
        findings.problem(
            "no subscription chosen and the login sees several (or none)",
            "set `pulumi config set azure-native:subscriptionId <id>` (`az account list`)",
        )
        return findings
    findings.note(f"Azure subscription {subscription}, {config.region}")
    base = f"/subscriptions/{subscription}"
    for step in (_providers, _size_and_quota, _deployer_rights, _budgets):
        try:
            step(findings, config, arm, base)
        except ArmError as error:
            what = step.__name__.strip("_").replace("_", " ")
            findings.note(f"could not check {what}: {error}")
    return findings


def _only_subscription(arm: ArmClient) -> str | None:
    enabled = enabled_subscriptions(arm.get("/subscriptions", "subscriptions").get("value", []))
    return enabled[0] if len(enabled) == 1 else None


def enabled_subscriptions(listed: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ids of the enabled subscriptions in ARM's list of those the login sees (`fab
    leaks` reads the list its own way: paged, from ARM only)."""
    return [s["subscriptionId"] for s in listed if s.get("state") == "Enabled"]


def _providers(findings: Findings, _config: Any, arm: ArmClient, base: str) -> None:
    for namespace in REQUIRED_PROVIDERS:
        state = arm.get(f"{base}/providers/{namespace}", "providers").get("registrationState")
        if state != "Registered":
            findings.problem(
                f"resource provider {namespace} is {state or 'unknown'} in this subscription",
                f"az provider register --namespace {namespace} --subscription "
                f"{base.rsplit('/', 1)[1]} (takes a minute or two)",
            )


def _size_and_quota(findings: Findings, config: Any, arm: ArmClient, base: str) -> None:
    skus = arm.get(
        f"{base}/providers/Microsoft.Compute/skus",
        "skus",
        **{"$filter": f"location eq '{config.region}'"},
    ).get("value", [])
    sku = next(
        (
            s
            for s in skus
            if s.get("resourceType") == "virtualMachines"
            and s.get("name", "").lower() == config.vm_size.lower()
        ),
        None,
    )
    if sku is None:
        findings.problem(
            f"{config.region} does not offer {config.vm_size}",
            "pick another azure-native:location or vmSize (`fab plan --cloud azure`)",
        )
        return
    restricted = [r for r in sku.get("restrictions", []) if r.get("type") == "Location"]
    if restricted:
        reason = restricted[0].get("reasonCode", "restricted")
        findings.problem(
            f"{config.vm_size} is not available to this subscription in {config.region} ({reason})",
            "pick another region, or ask Azure support to lift the restriction "
            "(a quota request of type 'Region access')",
        )
    subscription = base.rsplit("/", 1)[1]
    for line in quota_problems(arm, subscription, config, family=sku.get("family", "")):
        findings.problem_if(line)


def _deployer_rights(findings: Findings, _config: Any, arm: ArmClient, base: str) -> None:
    permissions = arm.get(
        f"{base}/providers/Microsoft.Authorization/permissions", "permissions"
    ).get("value", [])
    missing = [a for a in REQUIRED_ACTIONS if not allowed(a, permissions)]
    if missing:
        findings.problem(
            f"the deployer may not {', '.join(missing)} on this subscription",
            "ask for Owner, or Contributor plus User Access Administrator (role "
            "assignments), on the subscription",
        )


def allowed(action: str, permissions: list[dict]) -> bool:
    """Whether one of ARM's effective permission entries grants `action`."""
    for entry in permissions:
        granted = any(_matches(action, p) for p in entry.get("actions", []))
        excluded = any(_matches(action, p) for p in entry.get("notActions", []))
        if granted and not excluded:
            return True
    return False


def _matches(action: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(action.lower(), pattern.lower())


def _budgets(findings: Findings, _config: Any, arm: ArmClient, base: str) -> None:
    try:
        arm.get(f"{base}/providers/Microsoft.Consumption/budgets", "budgets")
    except ArmError as error:
        if error.status in (0, 401):
            raise
        findings.problem(
            f"this subscription cannot hold a Cost Management budget ({error})",
            "budgets need a pay-as-you-go, EA, MCA or CSP subscription (not a sponsorship "
            "or student offer) and Cost Management Contributor; use such a subscription",
        )
