"""Run the real program for an Azure stack under Pulumi's mocks, with what Azure would compute.

Azure computes the VM's name and managed identity, the public IPs and the registry's
login server, and answers the client-config look-up; these hooks give plausible values
so the program's wiring (which principal gets which role on what) is visible to the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi.runtime import mocks as pulumi_mocks

from tests.infra.mocks import Recorder, RunResult, main_program, run_program

STACK = "test"
LOCATION = "eastus"
VM = "azure-native:compute:VirtualMachine"
SUBSCRIPTION = "00000000-0000-0000-0000-00000000sub1"
DEPLOYER = "deployer-object-id"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1Y29zZS10cmFpbmluZy10ZXN0LWtleQ me@laptop"

GOOD_CONFIG: dict[str, Any] = {
    "cloud": "azure",
    "vmSize": "Standard_NC24ads_A100_v4",
    "sshPublicKey": SSH_KEY,
    "sshAllowedCidr": "203.0.113.7/32",
    "budgetAmount": "150",
    "alertEmails": '["ana@example.org", "ben@example.org"]',
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


def azure_recorder() -> Recorder:
    return Recorder(
        outputs={
            VM: lambda a: {
                "name": a.inputs["vmName"],
                "identity": {
                    "type": "SystemAssigned",
                    "principalId": f"principal-{a.inputs['vmName']}",
                },
            },
            "azure-native:network:PublicIPAddress": _public_ip,
            "azure-native:storage:BlobContainer": lambda a: {"name": a.inputs["containerName"]},
            "azure-native:containerregistry:Registry": lambda a: {
                "loginServer": f"{a.name}.azurecr.io"
            },
        },
        calls={
            "azure-native:authorization:getClientConfig": lambda a: {
                "subscriptionId": SUBSCRIPTION,
                "objectId": DEPLOYER,
                "tenantId": "tenant",
                "clientId": "client",
            }
        },
    )


def stack_settings(location: str = LOCATION, **overrides: Any) -> dict[str, str]:
    """The engine's view of a stack file: GOOD_CONFIG with camelCase overrides (None drops)."""
    raw = {**GOOD_CONFIG, **overrides}
    settings = {f"glucose-training:{k}": v for k, v in raw.items() if v is not None}
    settings["azure-native:location"] = location
    return settings


def run_stack(
    recorder: Recorder | None = None,
    *,
    location: str = LOCATION,
    transformation: Callable | None = None,
    **overrides: Any,
) -> RunResult:
    """Run the real program (pulumi/__main__.py) for an Azure stack; exceptions propagate."""
    return run_program(
        main_program(transformation),
        recorder or azure_recorder(),
        stack_settings(location, **overrides),
        stack=STACK,
    )
