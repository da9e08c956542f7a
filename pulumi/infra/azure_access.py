"""Who may do what on Azure: the roles a training box and its deployer get.

Role assignments are Azure RBAC resources; their names must be GUIDs. They are
derived from (scope, principal, role) the way Bicep's `guid()` does, so a re-run never
creates a duplicate assignment and a changed principal gets a new one.
"""

from __future__ import annotations

import uuid

import pulumi
from pulumi_azure_native import authorization, resources

# Built-in role ids (the same in every tenant).
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
ACR_PUSH = "8311e382-0749-4cb8-b61a-304f252e45ec"
# All the idle watchdog may do with the VM it runs on: see itself and deallocate itself
# (an OS shutdown keeps billing on Azure; deallocation stops it).
DEALLOCATE_ACTIONS = (
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
)
_GUID_NAMESPACE = uuid.UUID("5b0f3c1e-8a52-4a4e-9d0c-6f1f2a7c9e31")


def builtin_role(subscription_id: pulumi.Input[str], role_guid: str) -> pulumi.Output[str]:
    """The full id of a built-in role in the deploying subscription."""
    return pulumi.Output.concat(
        "/subscriptions/",
        subscription_id,
        "/providers/Microsoft.Authorization/roleDefinitions/",
        role_guid,
    )


def deallocate_role(
    name: str, group: resources.ResourceGroup, parent: pulumi.Resource
) -> authorization.RoleDefinition:
    """A custom role that can only read and deallocate VMs.

    Custom roles are assignable at a resource group at the narrowest; each VM's
    assignment is then scoped to that VM alone.
    """
    return authorization.RoleDefinition(
        name,
        scope=group.id,
        role_definition_id=group.name.apply(lambda g: _guid(g, "deallocate-role")),
        # Role names are unique per tenant: the group's (random-suffixed) name makes it so.
        role_name=pulumi.Output.concat("glucose-training self-deallocate (", group.name, ")"),
        description="Lets a training VM's idle watchdog deallocate that VM, nothing else.",
        role_type="CustomRole",
        permissions=[{"actions": list(DEALLOCATE_ACTIONS)}],
        assignable_scopes=[group.id],
        opts=pulumi.ResourceOptions(parent=parent),
    )


def grant(
    name: str,
    principal_id: pulumi.Input[str],
    scope: pulumi.Input[str],
    role_definition_id: pulumi.Input[str],
    parent: pulumi.Resource,
    principal_type: str | None = None,
) -> authorization.RoleAssignment:
    """Assign one role to one principal on one scope."""
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


def _guid(*parts: str) -> str:
    return str(uuid.uuid5(_GUID_NAMESPACE, "/".join(parts)))
