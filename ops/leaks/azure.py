"""Azure leftovers of a stack: its VMs, managed disks, network interfaces, public IP
addresses and snapshots, each with what it bills. Found in every resource group tagged
with the stack's `cost-scope`, read whole, and anywhere else in the subscription by that
tag: the program tags its group and what it declares (pulumi/infra/azure/), but a disk
Azure makes with a VM (its OS disk) carries no tag of ours. A group `pulumi destroy`
deleted took all of it along; one it kept (keepStorageOnDestroy) keeps what was left in it.

Read-only GETs on ARM with your Azure login's token (`GLUCOSE_ARM_ENDPOINT` moves ARM,
as for stack/arm.py): each request has a timeout, a next page is read only from ARM's
own endpoint and no redirect is followed (the token goes nowhere else), and at most
MAX_PAGES pages a listing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ops.leaks.found import Cost, Leak, LeakCheckError, box_cost
from ops.leaks.scope import StackScope
from ops.preflight.azure import enabled_subscriptions
from ops.preflight.checks import error_line
from stack.arm import API_VERSIONS, arm_endpoint

CALL_TIMEOUT_SECONDS = 15
MAX_PAGES = 50
# Microsoft.Resources' lists take `$filter=tagName eq '<name>' and tagValue eq '<value>'`:
# https://learn.microsoft.com/rest/api/resources/resource-groups/list
# https://learn.microsoft.com/rest/api/resources/resources/list
RESOURCES_API_VERSION = "2021-04-01"
KINDS = {
    "microsoft.compute/virtualmachines": "VM",
    "microsoft.compute/disks": "disk",
    "microsoft.network/networkinterfaces": "network interface",
    "microsoft.network/publicipaddresses": "public IP",
    "microsoft.compute/snapshots": "snapshot",
}
# A VM bills compute unless deallocated: "stopped" alone still bills
# (https://learn.microsoft.com/azure/virtual-machines/states-billing).
UNBILLED_POWER = ("PowerState/deallocated", "PowerState/deallocating")


class _Unfollowed(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a place to send the token to (urllib would resend
    every header, Authorization too)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_Unfollowed)


class ArmReader:
    """GETs on ARM with a bearer token, each within CALL_TIMEOUT_SECONDS."""

    def __init__(self, token: str, endpoint: str | None = None) -> None:
        self.token = token
        self.endpoint = (endpoint or arm_endpoint()).rstrip("/")

    def url(self, path: str, version: str, **query: str) -> str:
        params = {"api-version": version, **query}
        return (
            f"{self.endpoint}{path}?{urllib.parse.urlencode(params, quote_via=urllib.parse.quote)}"
        )

    def read(self, url: str) -> dict[str, Any]:
        if not url.startswith(f"{self.endpoint}/"):
            raise LeakCheckError(f"ARM named a page off {self.endpoint}; not followed")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with _OPENER.open(request, timeout=CALL_TIMEOUT_SECONDS) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise LeakCheckError(f"ARM refused GET {_path(url)}: HTTP {error.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise LeakCheckError(f"ARM at {self.endpoint} could not be read ({error})") from None

    def listing(self, url: str) -> list[dict[str, Any]]:
        """Every `value` of a list, page after page (`nextLink`)."""
        found: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            page = self.read(url)
            found.extend(page.get("value") or [])
            url = page.get("nextLink") or ""
            if not url:
                return found
        raise LeakCheckError(f"ARM was still paging {_path(url)} after {MAX_PAGES} pages")


def _path(url: str) -> str:
    return urllib.parse.urlsplit(url).path


def find(scope: StackScope, arm: ArmReader | None = None) -> list[Leak]:
    """Everything of the stack ARM still holds, VMs first; LeakCheckError when ARM
    cannot be asked (no login, a refusal, no answer)."""
    arm = arm or ArmReader(_token())
    subscription = scope.subscription or _only_subscription(arm)
    resources = _resources(arm, subscription, scope)
    order = list(KINDS.values())
    leaks = [_leak(arm, r) for r in resources if r.get("type", "").lower() in KINDS]
    return sorted(leaks, key=lambda leak: order.index(leak.kind))


def _token() -> str:
    from ops import azure_login

    try:
        return azure_login.arm_token()
    except Exception as error:  # azure-identity raises its own kinds for every way it fails
        raise LeakCheckError(f"no Azure login ({error_line(error)}); run `az login`") from None


def _only_subscription(arm: ArmReader) -> str:
    url = arm.url("/subscriptions", API_VERSIONS["subscriptions"])
    enabled = enabled_subscriptions(arm.listing(url))
    if len(enabled) != 1:
        raise LeakCheckError(
            f"the Azure login sees {len(enabled)} enabled subscriptions; name the stack's with "
            "azure-native:subscriptionId in its config, or ARM_SUBSCRIPTION_ID"
        )
    return enabled[0]


def tagged_filter(scope: StackScope) -> str:
    name, value = scope.tag
    return f"tagName eq '{name}' and tagValue eq '{value}'"


def listing_urls(arm: ArmReader, subscription: str, scope: StackScope) -> tuple[str, str]:
    """(the stack's tagged resource groups, its tagged resources) of `subscription`."""
    base, where = f"/subscriptions/{subscription}", {"$filter": tagged_filter(scope)}
    return (
        arm.url(f"{base}/resourcegroups", RESOURCES_API_VERSION, **where),
        arm.url(f"{base}/resources", RESOURCES_API_VERSION, **where),
    )


def _resources(arm: ArmReader, subscription: str, scope: StackScope) -> list[dict[str, Any]]:
    groups_url, tagged_url = listing_urls(arm, subscription, scope)
    found = {r["id"].lower(): r for r in arm.listing(tagged_url)}
    for group in arm.listing(groups_url):
        in_group = arm.url(f"{group['id']}/resources", RESOURCES_API_VERSION)
        found.update({r["id"].lower(): r for r in arm.listing(in_group)})
    return list(found.values())


def vm_url(arm: ArmReader, vm_id: str) -> str:
    return arm.url(vm_id, API_VERSIONS["virtual_machines"], **{"$expand": "instanceView"})


def _leak(arm: ArmReader, resource: dict[str, Any]) -> Leak:
    kind = KINDS[resource["type"].lower()]
    sku = (resource.get("sku") or {}).get("name", "")
    if kind == "VM":
        return _vm(arm, resource)
    if kind == "network interface":
        cost = Cost(0.0, basis="no charge of its own; it keeps its subnet from deletion")
        return Leak(kind, resource["id"], "", cost)
    held = resource.get("managedBy") or ""
    attached = f"attached to {held.rsplit('/', 1)[-1]}" if held else "unattached"
    detail = f"{sku} {attached if kind == 'disk' else ''}"
    return Leak(kind, resource["id"], detail, Cost(basis=f"{kind}s are not priced here"))


def _vm(arm: ArmReader, resource: dict[str, Any]) -> Leak:
    properties = arm.read(vm_url(arm, resource["id"])).get("properties") or {}
    size = (properties.get("hardwareProfile") or {}).get("vmSize", "?")
    statuses = (properties.get("instanceView") or {}).get("statuses") or []
    power = next((s["code"] for s in statuses if s.get("code", "").startswith("PowerState/")), "")
    spot = properties.get("priority") == "Spot"
    if power in UNBILLED_POWER:
        cost = Cost(0.0, basis=f"{power.split('/')[1]}: no compute billed; its disks are listed")
    else:
        cost = box_cost("azure", size, spot)
    state = power.split("/")[-1] or "power unknown"
    detail = f"{state} {size} {'spot' if spot else 'regular'}"
    return Leak("VM", resource["id"], detail, cost)
