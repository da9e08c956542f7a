"""A fake of the few Azure Resource Manager calls `fab` and the program make, on 127.0.0.1.

Not a plugin: the Azure program tests start one for the whole session (the program
reads compute usages before declaring anything) and the preflight tests their own.
State is plain data a test edits: which providers are registered, which SKUs a region
offers, the usages, the deployer's permissions, whether budgets are allowed, and the
VMs' power (`GET <vm>/instanceView`, `POST <vm>/start`, as `fab start` uses them), and
what a deadline changes (a resource's tags, a schedule's status: PATCH). Every request
is recorded with its bearer token, so a test can see what was asked and as whom.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from ops.preflight.azure import REQUIRED_PROVIDERS
from tests.fakes.local_http import LocalHttpServer, reply

SUBSCRIPTION = "00000000-0000-0000-0000-00000000sub1"
OWNER = [{"actions": ["*"], "notActions": []}]
TAGS = "/providers/Microsoft.Resources/tags/default"


def sku(name: str, family: str, vcpus: int, restricted: bool = False) -> dict[str, Any]:
    restrictions = (
        [{"type": "Location", "reasonCode": "NotAvailableForSubscription"}] if restricted else []
    )
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "family": family,
        "capabilities": [{"name": "vCPUs", "value": str(vcpus)}],
        "restrictions": restrictions,
    }


def usage(name: str, limit: int, current: int = 0) -> dict[str, Any]:
    return {
        "name": {"value": name, "localizedValue": name},
        "limit": limit,
        "currentValue": current,
    }


@dataclass
class ArmState:
    """What the fake answers; defaults: a healthy subscription with room for GPUs."""

    subscriptions: list[str] = field(default_factory=lambda: [SUBSCRIPTION])
    registered: set[str] = field(default_factory=lambda: set(REQUIRED_PROVIDERS))
    skus: dict[str, list[dict]] = field(
        default_factory=lambda: {
            "eastus": [
                sku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4),
                sku("Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24),
            ]
        }
    )
    usages: dict[str, list[dict]] = field(
        default_factory=lambda: {
            "eastus": [
                usage("cores", 100),
                usage("lowPriorityCores", 100),
                usage("standardNCASv3_T4Family", 64),
                usage("StandardNCADSA100v4Family", 96),
            ]
        }
    )
    permissions: list[dict] = field(default_factory=lambda: list(OWNER))
    budgets_error: tuple[int, str] | None = None
    vms: dict[str, str] = field(default_factory=dict)
    """VM resource id -> its power code (`PowerState/deallocated`, ...)."""
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    """Resource id -> its tags (Microsoft.Resources/tags)."""
    schedules: dict[str, str] = field(default_factory=dict)
    """DevTestLab schedule id -> its status (`Enabled`, `Disabled`)."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(path, bearer token) of every request, in order."""


class FakeArm(LocalHttpServer):
    """ARM answering `state` at `endpoint`."""

    def __init__(self, state: ArmState | None = None) -> None:
        self.state = state or ArmState()
        super().__init__(_handler(self))

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        state = self.state
        if path == "/subscriptions":
            return 200, {
                "value": [{"subscriptionId": s, "state": "Enabled"} for s in state.subscriptions]
            }
        match = re.fullmatch(r"/subscriptions/([^/]+)(/.*)", path)
        if not match or match.group(1) not in state.subscriptions:
            return 404, {"error": {"code": "SubscriptionNotFound", "message": path}}
        rest = match.group(2)
        if resource := re.fullmatch(r"(.*)" + re.escape(TAGS), path):
            return 200, {"properties": {"tags": state.tags.get(resource.group(1), {})}}
        if vm := re.fullmatch(r"(.*/virtualMachines/[^/]+)/instanceView", path):
            if vm.group(1) not in state.vms:
                return 404, {"error": {"code": "ResourceNotFound", "message": vm.group(1)}}
            codes = ["ProvisioningState/succeeded", state.vms[vm.group(1)]]
            return 200, {"statuses": [{"code": code} for code in codes]}
        if provider := re.fullmatch(r"/providers/(Microsoft\.[A-Za-z]+)", rest):
            namespace = provider.group(1)
            registered = namespace in state.registered
            return 200, {
                "namespace": namespace,
                "registrationState": "Registered" if registered else "NotRegistered",
            }
        if rest == "/providers/Microsoft.Compute/skus":
            location = re.search(r"location eq '([^']+)'", query.get("$filter", [""])[0])
            return 200, {"value": state.skus.get(location.group(1) if location else "", [])}
        if usages := re.fullmatch(r"/providers/Microsoft.Compute/locations/([^/]+)/usages", rest):
            return 200, {"value": state.usages.get(usages.group(1), [])}
        if rest == "/providers/Microsoft.Authorization/permissions":
            return 200, {"value": state.permissions}
        if rest == "/providers/Microsoft.Consumption/budgets":
            if state.budgets_error:
                status, code = state.budgets_error
                return status, {"error": {"code": code, "message": "not supported"}}
            return 200, {"value": []}
        return 404, {"error": {"code": "NotFound", "message": rest}}

    def act(self, path: str) -> tuple[int, Any]:
        """POST <vm>/start: the VM starts (and is running when next looked at)."""
        vm = re.fullmatch(r"(.*/virtualMachines/[^/]+)/start", path)
        if vm is None or vm.group(1) not in self.state.vms:
            return 404, {"error": {"code": "ResourceNotFound", "message": path}}
        self.state.vms[vm.group(1)] = "PowerState/running"
        return 202, {}

    def change(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """PATCH a resource's tags (Merge, Replace, Delete by name or name and value) or a
        schedule's status."""
        state = self.state
        if resource := re.fullmatch(r"(.*)" + re.escape(TAGS), path):
            tags = state.tags.setdefault(resource.group(1), {})
            given = body["properties"]["tags"]
            if body["operation"] == "Merge":
                tags.update(given)
            elif body["operation"] == "Replace":
                tags.clear()
                tags.update(given)
            else:
                for key, value in given.items():
                    if value in ("", tags.get(key)):
                        tags.pop(key, None)
            return 200, {"properties": {"tags": tags}}
        if path in state.schedules:
            state.schedules[path] = body["properties"]["status"]
            return 200, {"id": path, "properties": {"status": state.schedules[path]}}
        return 404, {"error": {"code": "ResourceNotFound", "message": path}}


def _handler(arm: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            arm.state.requests.append((url.path, token))
            status, body = arm.answer(url.path, parse_qs(url.query))
            reply(self, status, json.dumps(body).encode(), "application/json")

        def do_POST(self) -> None:
            url = urlparse(self.path)
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            arm.state.requests.append((url.path, token))
            status, body = arm.act(url.path)
            reply(self, status, json.dumps(body).encode() if body else b"", "application/json")

        def do_PATCH(self) -> None:
            url = urlparse(self.path)
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            arm.state.requests.append((url.path, token))
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            status, answer = arm.change(url.path, body)
            reply(self, status, json.dumps(answer).encode(), "application/json")

        def log_message(self, *args) -> None:
            pass

    return Handler
