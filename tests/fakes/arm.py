"""A fake of the few Azure Resource Manager calls `fab` and the program make, on 127.0.0.1.

Not a plugin: the Azure program tests start one for the whole session (the program
reads compute usages before declaring anything) and the preflight tests their own.
State is plain data a test edits: which providers are registered, which SKUs a region
offers, the usages, the deployer's permissions, whether budgets are allowed, and the
VMs' power (`GET <vm>/instanceView`, `POST <vm>/start` and `/deallocate`, each 202 with
an operation to read to its end, as ARM answers: a start's AllocationFailed is only
there), a VM's size and zone (`GET <vm>`, `PATCH <vm>` of its vmSize: 200 with the VM
"Updating" and an operation to read, as ARM answers it), and what a deadline changes (a
resource's tags, a schedule's status: PATCH). Every request is recorded with its bearer
token, so a test can see what was asked and as whom.

Operations take `operation_seconds` of wall time (0: done when first read): until then
the VM is starting, deallocating or "Updating", and ARM refuses another write to it
(409 Conflict); the operation is named by `Azure-AsyncOperation`, or by `Location` alone
(`operation_header`), the two ways ARM names one
(https://learn.microsoft.com/azure/azure-resource-manager/management/async-operations).
A size the subscription may not use in the VM's zone (a restricted SKU) is refused at
once, as ARM does, with `SkuNotAvailable`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
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
RETRY_AFTER_SECONDS = 0.2  # how soon a reader of an operation not ended is told to look again


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
class Operation:
    """One long-running operation: what reading it answers once it has ended, when it ends,
    and what it changes then (a VM's power or size)."""

    outcome: dict
    ends_at: float = 0.0
    effect: Callable[[], None] | None = None
    vm: str = ""

    def settle(self, now: float) -> bool:
        """Whether it has ended by `now`; its effect happens once, when it ends."""
        if now < self.ends_at:
            return False
        if self.effect is not None:
            effect, self.effect = self.effect, None
            effect()
        return True


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
    operations: dict[str, Operation] = field(default_factory=dict)
    """Operation id -> the operation (what reading it answers once ended: `status`, `error`)."""
    operation_seconds: float = 0.0
    """How long each start, deallocation or resize runs before it ends."""
    operation_header: str = "Azure-AsyncOperation"
    """The header naming an operation: `Azure-AsyncOperation`, or `Location` alone."""
    reboots: list[str] = field(default_factory=list)
    """VMs Azure rebooted onto another size (a PATCH of a running VM's vmSize)."""
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

    def read(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        """GET: an operation as ARM names it (in progress until it ends), else `answer`."""
        self._settle()
        if operation := re.fullmatch(r"/subscriptions/[^/]+/providers/.*/operations/([^/]+)", path):
            return self._operation_status(operation.group(1), "monitor" in query)
        return (*self.answer(path, query), {})

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
        if path in state.vms:
            return 200, self._vm(path)
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
        set (`start_refusals`); a started VM is running once its operation has ended. A
        VM busy with another operation, or a start of a size the subscription may not
        use there, is refused at once."""
        self._settle()
        vm = re.fullmatch(r"(.*/virtualMachines/[^/]+)/(start|deallocate)", path)
        if vm is None or vm.group(1) not in self.state.vms:
            return 404, {"error": {"code": "ResourceNotFound", "message": path}}, {}
        box, action = vm.groups()
        if refused := self._busy(box) or (action == "start" and self._restricted(box)):
            return (*refused, {})
        refusals = self.state.start_refusals.get(box) or []
        if action == "start" and refusals:
            code = refusals.pop(0)
            size = self.state.vm_sizes.get(box, DEFAULT_VM_SIZE)
            message = f"Allocation failed. We do not have sufficient capacity for {size}"
            return self._begin(
                box, {"status": "Failed", "error": {"code": code, "message": message}}
            )
        passing, final = {
            "start": ("PowerState/starting", "PowerState/running"),
            "deallocate": ("PowerState/deallocating", "PowerState/deallocated"),
        }[action]
        self.state.vms[box] = passing
        return self._begin(
            box, {"status": "Succeeded"}, lambda: self.state.vms.update({box: final})
        )

    def change(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        """PATCH a resource's tags (Merge, Replace, Delete by name or name and value), or
        a VM's size: 200 with the VM "Updating" and an operation, as ARM answers it; the
        size is the VM's once the operation has ended (a running VM reboots onto it)."""
        self._settle()
        state = self.state
        if path in state.vms:
            if refused := self._busy(path):
                return (*refused, {})
            size = body["properties"]["hardwareProfile"]["vmSize"]
            if state.vms[path] == "PowerState/running":
                state.reboots.append(path)
            began = self._begin(
                path, {"status": "Succeeded"}, lambda: state.vm_sizes.update({path: size})
            )
            return 200, self._vm(path), began[2]
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
            return 200, {"properties": {"tags": tags}}, {}
        if path in state.schedules:
            # GlobalSchedules_Update (2018-09-15) changes a schedule's tags alone.
            return 200, schedule_as_arm_answers(path, state.schedules[path]), {}
        return 404, {"error": {"code": "ResourceNotFound", "message": path}}, {}

    def replace(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        """PUT a schedule: its status is the body's."""
        if path not in self.state.schedules:
            return 404, {"error": {"code": "ResourceNotFound", "message": path}}, {}
        self.state.schedules[path] = body["properties"]["status"]
        return 200, schedule_as_arm_answers(path, self.state.schedules[path]), {}

    def _vm(self, vm: str) -> dict[str, Any]:
        """A VM as GET answers it: its size, zone and provisioning state."""
        now = time.monotonic()
        busy = any(op.vm == vm and now < op.ends_at for op in self.state.operations.values())
        return {
            "id": vm,
            "location": "eastus",
            "zones": [self.state.vm_zones.get(vm, "1")],
            "properties": {
                "hardwareProfile": {"vmSize": self.state.vm_sizes.get(vm, DEFAULT_VM_SIZE)},
                "provisioningState": "Updating" if busy else "Succeeded",
            },
        }

    def _busy(self, vm: str) -> tuple[int, Any] | None:
        """ARM's refusal of a write to a VM whose last operation has not ended."""
        if self._vm(vm)["properties"]["provisioningState"] == "Succeeded":
            return None
        message = "Another operation on this or dependent resource is in progress."
        return 409, {"error": {"code": "Conflict", "message": message}}

    def _restricted(self, vm: str) -> tuple[int, Any] | None:
        """ARM's refusal to start a VM on a size the subscription may not use in its zone."""
        size = self.state.vm_sizes.get(vm, DEFAULT_VM_SIZE)
        zone = self.state.vm_zones.get(vm, "1")
        entry = next((s for s in self.state.skus.get("eastus", []) if s["name"] == size), None)
        reasons = [
            r["reasonCode"]
            for r in (entry or {}).get("restrictions", [])
            if r["type"] == "Location" or zone in r.get("restrictionInfo", {}).get("zones", [])
        ]
        if not reasons:
            return None
        message = (
            f"The requested VM size {size} is currently not available in location 'eastus' "
            f"zones '{zone}' for subscription '{SUBSCRIPTION}' ({reasons[0]}). Please try "
            "another size or deploy to a different location or zones."
        )
        return 409, {"error": {"code": "SkuNotAvailable", "message": message}}

    def _begin(
        self, vm: str, outcome: dict, effect: Callable[[], None] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        """202 naming a new operation on `vm` (by `operation_header`), which ends
        `operation_seconds` from now with `outcome` and `effect`."""
        operation = f"op-{len(self.state.operations) + 1}"
        ends_at = time.monotonic() + self.state.operation_seconds
        self.state.operations[operation] = Operation(outcome, ends_at, effect, vm)
        self._settle()
        url = (
            f"{self.endpoint}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/"
            f"locations/eastus/operations/{operation}?api-version=2024-11-01"
        )
        if self.state.operation_header == "Location":
            return 202, {}, {"Location": url + "&monitor=true", "Retry-After": "0"}
        return 202, {}, {"Azure-AsyncOperation": url, "Retry-After": "0"}

    def _operation_status(self, operation: str, monitor: bool) -> tuple[int, Any, dict[str, str]]:
        """An operation as its Azure-AsyncOperation URL answers (`status`), or as its
        Location URL does (202 until it ends, then the outcome's HTTP status)."""
        found = self.state.operations[operation]
        again = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        if not found.settle(time.monotonic()):
            return (202, {}, again) if monitor else (200, {"status": "InProgress"}, again)
        if not monitor:
            return 200, found.outcome, {}
        if found.outcome["status"] != "Succeeded":
            return 409, {"error": found.outcome["error"]}, {}
        return 200, self._vm(found.vm), {}

    def _settle(self) -> None:
        now = time.monotonic()
        for operation in self.state.operations.values():
            operation.settle(now)


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
            status, body, headers = arm.read(url.path, parse_qs(url.query))
            payload = json.dumps(body).encode() if status != 202 else b""
            reply(self, status, payload, "application/json", headers)

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
            status, answer, headers = action(url.path, body)
            reply(self, status, json.dumps(answer).encode(), "application/json", headers)

        def log_message(self, *args) -> None:
            pass

    return Handler
