"""Every azure-native type the program declares: the model and request builder of the
api-version it sends, the limits only Azure's documentation states, and what no
reference decides.

The reference test fails on a declared type missing here, on an input no model knows,
and on an api-version azure-native sends that the mapped reference is not of (the
two exceptions are named, with the nearest version the packages ship).
"""

from __future__ import annotations

from tests.pulumi.references.azure import Documented, Model
from tests.pulumi.references.constraints import Constraint

_NETWORK = ("azure.mgmt.network.models", "azure.mgmt.network.operations._operations")
_STORAGE = "azure.mgmt.storage.models"
_COMPUTE = "azure.mgmt.compute.models"
_RESOURCES = "azure.mgmt.resource.resources.v2024_07_01"
_REGISTRY = "azure.mgmt.containerregistry.v2023_01_01_preview"
_AUTHORIZATION = "azure.mgmt.authorization.v2022_04_01"


def _network(model: str, builder: str, name: str) -> Model:
    return Model(_NETWORK[0], model, _NETWORK[1], f"build_{builder}_create_or_update_request", name)


AZURE: dict[str, Model] = {
    "azure-native:resources:ResourceGroup": Model(
        f"{_RESOURCES}.models", "ResourceGroup", f"{_RESOURCES}.operations._operations",
        "build_resource_groups_create_or_update_request", "resource_group_name",
    ),
    "azure-native:network:NetworkSecurityGroup": _network(
        "NetworkSecurityGroup", "network_security_groups", "network_security_group_name"
    ),
    "azure-native:network:VirtualNetwork": _network(
        "VirtualNetwork", "virtual_networks", "virtual_network_name"
    ),
    "azure-native:network:Subnet": _network("Subnet", "subnets", "subnet_name"),
    "azure-native:network:PublicIPAddress": _network(
        "PublicIPAddress", "public_ip_addresses", "public_ip_address_name"
    ),
    "azure-native:network:NetworkInterface": _network(
        "NetworkInterface", "network_interfaces", "network_interface_name"
    ),
    "azure-native:storage:StorageAccount": Model(
        _STORAGE, "StorageAccountCreateParameters",
        "azure.mgmt.storage.operations._storage_accounts_operations", "build_create_request",
        "account_name",
    ),
    "azure-native:storage:BlobServiceProperties": Model(
        _STORAGE, "BlobServiceProperties",
        "azure.mgmt.storage.operations._blob_services_operations",
        "build_set_service_properties_request", "account_name",
    ),
    "azure-native:storage:BlobContainer": Model(
        _STORAGE, "BlobContainer", "azure.mgmt.storage.operations._blob_containers_operations",
        "build_create_request", "container_name",
    ),
    "azure-native:storage:ManagementPolicy": Model(
        _STORAGE, "ManagementPolicy",
        "azure.mgmt.storage.operations._management_policies_operations",
        "build_create_or_update_request", "management_policy_name",
    ),
    "azure-native:containerregistry:Registry": Model(
        f"{_REGISTRY}.models", "Registry", f"{_REGISTRY}.operations._registries_operations",
        "build_create_request", "registry_name",
    ),
    "azure-native:compute:ProximityPlacementGroup": Model(
        _COMPUTE, "ProximityPlacementGroup",
        "azure.mgmt.compute.operations._proximity_placement_groups_operations",
        "build_create_or_update_request", "proximity_placement_group_name",
    ),
    "azure-native:compute:VirtualMachine": Model(
        _COMPUTE, "VirtualMachine", "azure.mgmt.compute.operations._virtual_machines_operations",
        "build_create_or_update_request", "vm_name",
    ),
    "azure-native:devtestlab:GlobalSchedule": Model(
        "azure.mgmt.devtestlabs.models", "Schedule",
        "azure.mgmt.devtestlabs.operations._global_schedules_operations",
        "build_create_or_update_request", "name",
    ),
    "azure-native:consumption:Budget": Model(
        "azure.mgmt.consumption.models", "Budget", "azure.mgmt.consumption.operations._operations",
        "build_budgets_create_or_update_request", "budget_name",
    ),
    "azure-native:logic:Workflow": Model(
        "azure.mgmt.logic.models", "Workflow", "azure.mgmt.logic.operations._workflows_operations",
        "build_create_or_update_request", "workflow_name",
    ),
    "azure-native:monitor:ActionGroup": Model(
        "azure.mgmt.monitor.models", "ActionGroupResource",
        "azure.mgmt.monitor.operations._action_groups_operations",
        "build_create_or_update_request", "action_group_name",
    ),
    "azure-native:monitor:ActivityLogAlert": Model(
        "azure.mgmt.monitor.models", "ActivityLogAlertResource",
        "azure.mgmt.monitor.operations._activity_log_alerts_operations",
        "build_create_or_update_request", "activity_log_alert_name",
    ),
    "azure-native:authorization:RoleAssignment": Model(
        f"{_AUTHORIZATION}.models", "RoleAssignmentCreateParameters",
        f"{_AUTHORIZATION}.operations._role_assignments_operations", "build_create_request",
        "role_assignment_name",
    ),
}  # fmt: skip

# azure-native's api-version -> the nearest one an azure-mgmt release ships, where none
# ships the exact one. Any other mismatch fails the test.
KNOWN_VERSION_GAPS: dict[str, tuple[str, str]] = {
    # No azure-mgmt-resource has resources/v2024_03_01; the model is location, tags,
    # managedBy in every version.
    "azure-native:resources:ResourceGroup": ("2024-03-01", "2024-07-01"),
    # azure-mgmt-monitor (7.0.0, the newest) stops at 2023-01-01 for action groups.
    "azure-native:monitor:ActionGroup": ("2024-10-01-preview", "2023-01-01"),
}

# Body inputs no model can judge, and why.
EXCUSED: dict[str, dict[str, str]] = {
    "azure-native:compute:VirtualMachine": {
        # "Known values" frozen in 2017 (no NC A100/H100); stack/offerings.json judges it.
        "hardwareProfile.vmSize": "VirtualMachineSizeTypes is a frozen legacy list",
        "osProfile.customData": "base64 cloud-init: its size is checked by its own test",
    },
    "azure-native:logic:Workflow": {
        # The Workflow Definition Language: an `object` to the model. Its deallocate
        # URLs are checked by arm_urls.py; its schema has no offline reference.
        "definition": "the Logic App's own language, no offline schema",
    },
}

_TAG_LIMITS = (
    "https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations"
)
_BUDGET_LIMITS = (
    "azure-mgmt-consumption 10.0.0 (api 2021-10-01) _validation; the 2024-08-01 model "
    "dropped it; Budget.notifications' docs: 'up to five notifications'"
)
# Every resource's tags (where it has any).
TAG_LIMITS = (
    Documented("tags", Constraint(_TAG_LIMITS, max_items=50)),
    Documented("tags.@keys", Constraint(_TAG_LIMITS, max=512, pattern=r"[^<>%&\\?/]*")),
    Documented("tags.*", Constraint(_TAG_LIMITS, type="string", max=256)),
)
# Limits the models leave out, each with where it is stated.
DOCUMENTED: dict[str, tuple[Documented, ...]] = {
    "azure-native:consumption:Budget": (
        Documented("notifications", Constraint(_BUDGET_LIMITS, max_items=5)),
        Documented("notifications.*.contactEmails", Constraint(_BUDGET_LIMITS, max_items=50)),
        Documented("notifications.*.contactGroups", Constraint(_BUDGET_LIMITS, max_items=50)),
    ),
    "azure-native:network:NetworkSecurityGroup": (
        Documented(
            "securityRules[].priority",
            Constraint("azure-mgmt-network SecurityRule.priority docstring", min=100, max=4096),
        ),
    ),
    "azure-native:monitor:ActionGroup": (
        Documented(
            "emailReceivers",
            Constraint(
                "https://learn.microsoft.com/azure/azure-monitor/alerts/action-groups "
                "(1,000 email actions in an action group)",
                max_items=1000,
            ),
        ),
    ),
}

# Dynamic resources have no cloud schema: what each carries and the rule it meets.
BLOB_NAME = Constraint(
    "https://learn.microsoft.com/rest/api/storageservices/naming-and-referencing-containers--blobs--and-metadata#blob-names",
    type="string",
    min=1,
    max=1024,
    pattern=r"(?s).*[^./\\]",  # "avoid names that end with a dot, a slash or a backslash"
)
DYNAMIC: dict[str, dict[str, Constraint | str]] = {
    "pulumi-python:dynamic/glucose-training:BoxProgramsBlob": {
        "key": BLOB_NAME,
        "account": "the storage account's name, checked on the StorageAccount",
        "container": "the container's name, checked on the BlobContainer",
        "archive": "the archive's bytes (base64), a block blob of a few KB",
        "sha256": "the program's own integrity record, never sent to Azure",
        "__provider": "the pickled provider Pulumi runs the upload with",
    },
}
