"""Who may do what on Azure: the roles a training box, the budget stop, the keeper and the
deployer get.

Only built-in roles, each assigned on the narrowest scope that works (one VM, one
container, one registry). A custom role would be narrower still, but ARM replicates a
new role definition lazily: assigning it right after creating it fails with
`RoleDefinitionDoesNotExist` on a first `pulumi up` (after the VMs exist), and creating
it needs `roleDefinitions/write`, which Contributor + User Access Administrator lack.

Role assignments are Azure RBAC resources; their names must be GUIDs. They are
derived from (scope, principal, role) the way Bicep's `guid()` does, so a re-run never
creates a duplicate assignment and a changed principal gets a new one. Every
assignment states its principal's type: ARM assumes `User` otherwise, and a
managed identity or a CI service principal then fails with `UnmatchedPrincipalType`
(or `PrincipalNotFound` while a new identity replicates).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid

import pulumi
from pulumi_azure_native import authorization, compute, containerregistry, storage

# Built-in role ids (the same in every tenant).
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
ACR_PUSH = "8311e382-0749-4cb8-b61a-304f252e45ec"
# "Desktop Virtualization Power On Off Contributor": read, start, restart, power off
# and deallocate VMs. Assigned on one VM, it is what the idle watchdog (deallocating
# its own VM: an OS shutdown keeps billing on Azure) and the budget stop need.
POWER_ON_OFF = "40c5ff49-9181-41f8-ae61-143b0e78555e"
# "Tag Contributor": the tags of what it is assigned on, not the thing itself. Whoever
# stops a box on purpose deletes its run deadline tag (box.contract.DEADLINE_TAG) first.
TAG_CONTRIBUTOR = "4a9ae827-6dc8-4573-8ac7-8239d42aa03f"
# "Virtual Machine Contributor": a built-in role that holds
# Microsoft.DevTestLab/schedules/write (as `Microsoft.DevTestLab/schedules/*`: a VM's
# auto-shutdown is one). Assigned only on one daily-stop schedule, where its VM, disk
# and network actions have nothing to act on, it grants that schedule and nothing else:
# as narrow there as a custom role would be.
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
SERVICE_PRINCIPAL = "ServicePrincipal"
USER = "User"
_GUID_NAMESPACE = uuid.UUID("5b0f3c1e-8a52-4a4e-9d0c-6f1f2a7c9e31")


def builtin_role(subscription_id: pulumi.Input[str], role_guid: str) -> pulumi.Output[str]:
    """The full id of a built-in role in the deploying subscription."""
    return pulumi.Output.concat(
        "/subscriptions/",
        subscription_id,
        "/providers/Microsoft.Authorization/roleDefinitions/",
        role_guid,
    )


def grant(
    name: str,
    principal_id: pulumi.Input[str],
    scope: pulumi.Input[str],
    role_definition_id: pulumi.Input[str],
    parent: pulumi.Resource,
    principal_type: str,
) -> authorization.RoleAssignment:
    """Assign one role to one principal (of the given type) on one scope."""
    return authorization.RoleAssignment(
        name,
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=role_definition_id,
        scope=scope,
        role_assignment_name=pulumi.Output.all(scope, principal_id, role_definition_id).apply(
            lambda parts: _guid(*parts)
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def principal_type_of_token(token: str) -> str:
    """`User` or `ServicePrincipal`, from the claims of the deployer's ARM access token.

    Microsoft Entra tokens say `idtyp` (`app` or `user`); without it, a delegated
    (user) token carries scopes (`scp`) and an app-only one does not. A managed
    identity is a service principal too.
    """
    claims = _claims(token)
    kind = claims.get("idtyp")
    if kind in ("app", "user"):
        return SERVICE_PRINCIPAL if kind == "app" else USER
    return USER if "scp" in claims else SERVICE_PRINCIPAL


def _claims(token: str) -> dict:
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        raise ValueError(
            "the deployer's Azure token is not a JWT; set "
            "glucose-training:deployerPrincipalType (User or ServicePrincipal)"
        ) from None


def _guid(*parts: str) -> str:
    return str(uuid.uuid5(_GUID_NAMESPACE, "/".join(parts)))


def declare_deployer_access(
    name: str,
    container: storage.BlobContainer,
    registry: containerregistry.Registry,
    client: pulumi.Output,
    principal_type: pulumi.Input[str],
    parent: pulumi.Resource,
) -> authorization.RoleAssignment:
    """Shared-key access is off, so whoever runs `pulumi up` reaches data and images
    through their own identity (`fab upload-data`, `fab download`, `fab push`, and this
    program's upload of the box programs); the data grant, which that upload waits for."""
    blob_role = builtin_role(client.subscription_id, STORAGE_BLOB_DATA_CONTRIBUTOR)
    push_role = builtin_role(client.subscription_id, ACR_PUSH)
    deployer = client.object_id
    grant(f"{name}-deployer-acrpush", deployer, registry.id, push_role, parent, principal_type)
    return grant(f"{name}-deployer-blob", deployer, container.id, blob_role, parent, principal_type)


def declare_box_access(
    name: str,
    vms: list[compute.VirtualMachine],
    container: storage.BlobContainer,
    registry: containerregistry.Registry,
    client: pulumi.Output,
    parent: pulumi.Resource,
) -> None:
    """Each box: data (checkpoints, datasets, its programs), image pulls, deallocating itself
    (its run deadline tag deleted first)."""
    blob_role = builtin_role(client.subscription_id, STORAGE_BLOB_DATA_CONTRIBUTOR)
    power_role = builtin_role(client.subscription_id, POWER_ON_OFF)
    pull_role = builtin_role(client.subscription_id, ACR_PULL)
    tag_role = builtin_role(client.subscription_id, TAG_CONTRIBUTOR)
    for index, vm in enumerate(vms):
        box = vm.identity.apply(lambda identity: identity.principal_id)
        prefix = f"{name}-{index}"
        grant(f"{prefix}-blob", box, container.id, blob_role, parent, SERVICE_PRINCIPAL)
        grant(f"{prefix}-acrpull", box, registry.id, pull_role, parent, SERVICE_PRINCIPAL)
        grant(f"{prefix}-deallocate", box, vm.id, power_role, parent, SERVICE_PRINCIPAL)
        grant(f"{prefix}-untag", box, vm.id, tag_role, parent, SERVICE_PRINCIPAL)
