"""A fake of the few Azure Resource Manager calls `fab` and the program make, on 127.0.0.1.

Not a plugin: the Azure program tests start one for the whole session (the program
reads compute usages before declaring anything) and the preflight tests their own.
State is plain data a test edits: which providers are registered, which SKUs a region
offers, the usages, the deployer's permissions, whether budgets are allowed, and the
VMs' power (`GET <vm>/instanceView`, `POST <vm>/start` and `/deallocate`, each 202 with
an operation to read to its end, as ARM answers: a start's AllocationFailed is only
there), a VM's size and zone (`GET <vm>`, `PATCH <vm>` of its vmSize), and what a
deadline changes (a resource's tags, a schedule's status: PATCH). Every request is
recorded with its bearer token, so a test can see what was asked and as whom.
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
DEFAULT_VM_SIZE = "Standard_NC24ads_A100_v4"
OWNER = [{"actions": ["*"], "notActions": []}]
TAGS = "/providers/Microsoft.Resources/tags/default"


def sku(
    name: str,
    family: str,
    vcpus: int,
    restricted: bool = False,
    zones: tuple[str, ...] = ("1", "2", "3"),
    restricted_zones: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A VM size as the Resource SKUs API lists it: where (zones) and whether the
    subscription may use it (a Location restriction), or not in some zones."""
    restrictions = (
        [{"type": "Location", "reasonCode": "NotAvailableForSubscription"}] if restricted else []
    )
    if restricted_zones:
        restrictions.append(
            {
                "type": "Zone",
                "reasonCode": "NotAvailableForSubscription",
                "restrictionInfo": {"locations": ["eastus"], "zones": list(restricted_zones)},
            }
        )
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "family": family,
        "locations": ["eastus"],
        "locationInfo": [{"location": "eastus", "zones": list(zones)}],
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
    vm_sizes: dict[str, str] = field(default_factory=dict)
    """VM resource id -> its size (default Standard_NC24ads_A100_v4)."""
    vm_zones: dict[str, str] = field(default_factory=dict)
    """VM resource id -> its zone (default "1")."""
    start_refusals: dict[str, list[str]] = field(default_factory=dict)
    """VM resource id -> the codes its next starts' operations end with, one per start
    (AllocationFailed...); an empty list: the start succeeds."""
    operations: dict[str, dict] = field(default_factory=dict)
    """Operation id -> what reading it answers (`status`, `error`)."""
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
        if path in state.schedules:
            return 200, schedule_as_arm_answers(path, state.schedules[path])
        if operation := re.fullmatch(r".*/operations/([^/]+)", rest):
            return 200, state.operations[operation.group(1)]
        if path in state.vms:
            size = state.vm_sizes.get(path, DEFAULT_VM_SIZE)
            zones = [state.vm_zones.get(path, "1")]
            return 200, {
                "id": path,
                "zones": zones,
                "properties": {"hardwareProfile": {"vmSize": size}},
            }
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

    def act(self, path: str) -> tuple[int, Any, dict[str, str]]:
        """POST <vm>/start or /deallocate: 202 and an operation, which ends as the test
        set (`start_refusals`); a started VM is running when next looked at."""
        vm = re.fullmatch(r"(.*/virtualMachines/[^/]+)/(start|deallocate)", path)
        if vm is None or vm.group(1) not in self.state.vms:
            return 404, {"error": {"code": "ResourceNotFound", "message": path}}, {}
        box, action = vm.groups()
        refusals = self.state.start_refusals.get(box) or []
        if action == "start" and refusals:
            code = refusals.pop(0)
            size = self.state.vm_sizes.get(box, DEFAULT_VM_SIZE)
            message = f"Allocation failed. We do not have sufficient capacity for {size}"
            return self._operation(
                {"status": "Failed", "error": {"code": code, "message": message}}
            )
        self.state.vms[box] = (
            "PowerState/running" if action == "start" else "PowerState/deallocated"
        )
        return self._operation({"status": "Succeeded"})

    def _operation(self, outcome: dict) -> tuple[int, Any, dict[str, str]]:
        operation = f"op-{len(self.state.operations) + 1}"
        self.state.operations[operation] = outcome
        url = (
            f"{self.endpoint}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/"
            f"locations/eastus/operations/{operation}?api-version=2024-11-01"
        )
        return 202, {}, {"Azure-AsyncOperation": url, "Retry-After": "0"}

    def change(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """PATCH a resource's tags (Merge, Replace, Delete by name or name and value), or
        a deallocated VM's size (ARM refuses it on a running VM's host: 409 here)."""
        state = self.state
        if path in state.vms:
            if state.vms[path] != "PowerState/deallocated":
                return 409, {"error": {"code": "OperationNotAllowed", "message": "running"}}
            state.vm_sizes[path] = body["properties"]["hardwareProfile"]["vmSize"]
            return 200, {"id": path, "properties": body["properties"]}
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
            # GlobalSchedules_Update (2018-09-15) changes a schedule's tags alone.
            return 200, schedule_as_arm_answers(path, state.schedules[path])
        return 404, {"error": {"code": "ResourceNotFound", "message": path}}

    def replace(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """PUT a schedule: its status is the body's."""
        if path not in self.state.schedules:
            return 404, {"error": {"code": "ResourceNotFound", "message": path}}
        self.state.schedules[path] = body["properties"]["status"]
        return 200, schedule_as_arm_answers(path, self.state.schedules[path])


def schedule_as_arm_answers(schedule_id: str, status: str) -> dict[str, Any]:
    """A VM's daily-stop schedule as GET answers it, read-only properties included."""
    vm = schedule_id.replace("/providers/Microsoft.DevTestLab/schedules/shutdown-computevm-",
                             "/providers/Microsoft.Compute/virtualMachines/")  # fmt: skip
    return {
        "id": schedule_id,
        "name": schedule_id.rsplit("/", 1)[-1],
        "type": "microsoft.devtestlab/schedules",
        "location": "eastus",
        "tags": {"project": "glucose-training"},
        "properties": {
            "status": status,
            "taskType": "ComputeVmShutdownTask",
            "dailyRecurrence": {"time": "1900"},
            "timeZoneId": "UTC",
            "notificationSettings": {"status": "Disabled", "timeInMinutes": 30},
            "targetResourceId": vm,
            "createdDate": "2026-11-20T10:00:00.0000000+00:00",
            "provisioningState": "Succeeded",
            "uniqueIdentifier": "6d3b0f55-1f6c-4c2b-9a57-0a5d3c1f2e11",
        },
    }


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
            status, body, headers = arm.act(url.path)
            payload = json.dumps(body).encode() if body else b""
            reply(self, status, payload, "application/json", headers)

        def do_PATCH(self) -> None:
            self._write(arm.change)

        def do_PUT(self) -> None:
            self._write(arm.replace)

        def _write(self, action) -> None:
            url = urlparse(self.path)
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            arm.state.requests.append((url.path, token))
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            status, answer = action(url.path, body)
            reply(self, status, json.dumps(answer).encode(), "application/json")

        def log_message(self, *args) -> None:
            pass

    return Handler
