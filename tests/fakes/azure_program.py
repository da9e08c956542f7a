"""Run the real program for an Azure stack under Pulumi's mocks, with what Azure would compute.

Azure computes the VM's name and managed identity, the public IPs and the registry's
login server, and answers the client-config and token look-ups; these hooks give
plausible values so the program's wiring (which principal gets which role on what) is
visible to the tests. The program reads the compute usages over ARM before declaring
anything: a fake ARM on 127.0.0.1 (tests/fakes/arm.py) answers, one for the session.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from pulumi.runtime import mocks as pulumi_mocks

from stack.arm import ARM_ENDPOINT_ENV
from tests.fakes.arm import SUBSCRIPTION, FakeArm
from tests.fakes.pulumi_mocks import Recorder, RunResult, main_program, run_program

STACK = "test"
LOCATION = "eastus"
VM = "azure-native:compute:VirtualMachine"
DEPLOYER = "deployer-object-id"
_FAKE_ARM: list[FakeArm] = []


def access_token(**claims: Any) -> str:
    """An unsigned JWT with `claims`: what get_client_token hands the program."""

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.signature"


USER_TOKEN = access_token(idtyp="user", scp="user_impersonation", oid=DEPLOYER)
SERVICE_PRINCIPAL_TOKEN = access_token(idtyp="app", oid=DEPLOYER, appid="ci-app")
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1Y29zZS10cmFpbmluZy10ZXN0LWtleQ me@laptop"

GOOD_CONFIG: dict[str, Any] = {
    "cloud": "azure",
    "vmSize": "Standard_NC24ads_A100_v4",
    "sshPublicKey": SSH_KEY,
    "sshAllowedCidr": "198.18.0.7/32",
    "budgetAmount": "150",
    "alertEmails": '["ana@lab.dev", "ben@lab.dev"]',
    "autoShutdownTime": "21:30",
    "autoShutdownTimeZone": "Europe/Berlin",
    "idleShutdownMinutes": "45",
    "osDiskSizeGb": "256",
    "owner": "ana",
}


def _public_ip(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
    # From the box's index in the name (glucose-0-ip), not from the order of
    # registration, which follows whichever inputs resolve first.
    index = int(args.name.rsplit("-", 2)[1])
    return {"ipAddress": f"20.30.40.{index + 1}"}


def _nic(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
    """Azure's dynamic private address: glucose-1-nic gets 10.42.0.5."""
    index = int(args.name.rsplit("-", 2)[1])
    configurations = [
        {**configuration, "privateIPAddress": f"10.42.0.{index + 4}"}
        for configuration in args.inputs["ipConfigurations"]
    ]
    return {"ipConfigurations": configurations}


# Where each type lives under its resource group, for ids in ARM's own format.
_ARM_TYPES = {
    "azure-native:network:NetworkSecurityGroup": "Microsoft.Network/networkSecurityGroups",
    "azure-native:network:VirtualNetwork": "Microsoft.Network/virtualNetworks",
    "azure-native:network:PublicIPAddress": "Microsoft.Network/publicIPAddresses",
    "azure-native:network:NetworkInterface": "Microsoft.Network/networkInterfaces",
    "azure-native:storage:StorageAccount": "Microsoft.Storage/storageAccounts",
    "azure-native:containerregistry:Registry": "Microsoft.ContainerRegistry/registries",
    "azure-native:compute:ProximityPlacementGroup": "Microsoft.Compute/proximityPlacementGroups",
    VM: "Microsoft.Compute/virtualMachines",
    "azure-native:devtestlab:GlobalSchedule": "Microsoft.DevTestLab/schedules",
    "azure-native:logic:Workflow": "Microsoft.Logic/workflows",
    "azure-native:monitor:ActionGroup": "Microsoft.Insights/actionGroups",
    "azure-native:monitor:ActivityLogAlert": "Microsoft.Insights/activityLogAlerts",
}
_BLOB_SERVICE_PARTS = {
    "azure-native:storage:BlobServiceProperties": "/blobServices/default",
    "azure-native:storage:BlobContainer": "/blobServices/default/containers/",
    "azure-native:storage:ManagementPolicy": "/managementPolicies/default",
}


def azure_id(args: pulumi_mocks.MockResourceArgs) -> str:
    """The ARM resource id Azure would give the resource (what `cloud_ids` recorders return)."""
    inputs, kind = args.inputs, args.typ
    group = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{inputs.get('resourceGroupName')}"
    if kind == "azure-native:resources:ResourceGroup":
        return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{args.name}"
    if kind == "azure-native:network:Subnet":
        vnet = f"{group}/providers/Microsoft.Network/virtualNetworks/{inputs['virtualNetworkName']}"
        return f"{vnet}/subnets/{args.name}"
    if kind in _BLOB_SERVICE_PARTS:
        account = f"{group}/providers/Microsoft.Storage/storageAccounts/{inputs['accountName']}"
        return account + _BLOB_SERVICE_PARTS[kind] + inputs.get("containerName", "")
    if kind == "azure-native:consumption:Budget":
        return f"{inputs['scope']}/providers/Microsoft.Consumption/budgets/{inputs['budgetName']}"
    if kind == "azure-native:authorization:RoleAssignment":
        name = inputs["roleAssignmentName"]
        return f"{inputs['scope']}/providers/Microsoft.Authorization/roleAssignments/{name}"
    if kind in _ARM_TYPES:
        name = inputs.get("vmName") or inputs.get("name") or args.name
        return f"{group}/providers/{_ARM_TYPES[kind]}/{name}"
    return f"{kind}/{args.name}"  # a dynamic resource: its id is its provider's own


def _vm(args: pulumi_mocks.MockResourceArgs) -> dict[str, Any]:
    """Azure names the VM and its identity, and picks its zone among `includeZones`
    (here the first: on a real region, one with room)."""
    name = args.inputs["vmName"]
    zones = (args.inputs.get("placement") or {}).get("includeZones") or []
    return {
        "name": name,
        "identity": {"type": "SystemAssigned", "principalId": f"principal-{name}"},
        **({"zones": zones[:1]} if zones else {}),
    }


def azure_recorder(token: str = USER_TOKEN, *, cloud_ids: bool = False) -> Recorder:
    """Mocks answering as Azure would; `token` is the deployer's ARM access token;
    `cloud_ids` gives ARM resource ids instead of `<type>/<name>`."""
    return Recorder(
        ids=azure_id if cloud_ids else None,
        outputs={
            VM: _vm,
            "azure-native:network:PublicIPAddress": _public_ip,
            "azure-native:network:NetworkInterface": _nic,
            "azure-native:storage:BlobContainer": lambda a: {"name": a.inputs["containerName"]},
            "azure-native:containerregistry:Registry": lambda a: {
                "loginServer": f"{a.name}.azurecr.io"
            },
            "azure-native:logic:Workflow": lambda a: {
                "name": f"{a.name}-a1b2c3",
                "identity": {"type": "SystemAssigned", "principalId": f"principal-{a.name}"},
            },
        },
        calls={
            "azure-native:authorization:getClientToken": lambda a: {"token": token},
            "azure-native:logic:listWorkflowTriggerCallbackUrl": lambda a: {
                "value": f"https://logic.example/workflows/{a.args['workflowName']}?sig=SECRET",
                "method": "POST",
            },
            "azure-native:authorization:getClientConfig": lambda a: {
                "subscriptionId": SUBSCRIPTION,
                "objectId": DEPLOYER,
                "tenantId": "tenant",
                "clientId": "client",
            },
        },
    )


def stack_settings(location: str = LOCATION, **overrides: Any) -> dict[str, str]:
    """The engine's view of a stack file: GOOD_CONFIG with camelCase overrides (None drops)."""
    raw = {**GOOD_CONFIG, **overrides}
    settings = {f"glucose-training:{k}": v for k, v in raw.items() if v is not None}
    settings["azure-native:location"] = location
    return settings


def fake_arm() -> FakeArm:
    """The session's fake ARM (started on first use, with a healthy subscription)."""
    if not _FAKE_ARM:
        _FAKE_ARM.append(FakeArm())
    return _FAKE_ARM[0]


@contextlib.contextmanager
def arm_at(arm: FakeArm) -> Iterator[None]:
    """Point the program's ARM reads at `arm` for the duration."""
    saved = os.environ.get(ARM_ENDPOINT_ENV)
    os.environ[ARM_ENDPOINT_ENV] = arm.endpoint
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ARM_ENDPOINT_ENV, None)
        else:
            os.environ[ARM_ENDPOINT_ENV] = saved


def run_stack(
    recorder: Recorder | None = None,
    *,
    location: str = LOCATION,
    transformation: Callable | None = None,
    arm: FakeArm | None = None,
    **overrides: Any,
) -> RunResult:
    """Run the real program (pulumi/__main__.py) for an Azure stack; exceptions propagate."""
    with arm_at(arm or fake_arm()):
        return run_program(
            main_program(transformation),
            recorder or azure_recorder(),
            stack_settings(location, **overrides),
            stack=STACK,
        )
