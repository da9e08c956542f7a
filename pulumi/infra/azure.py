"""`cloud: azure` — N GPU boxes with guard rails, private storage and a registry.

One ComponentResource, `AzureTrainingBox`, with the same public shape as the AWS one
(`hosts`, `ssh_user`, `storage_uri`, `registry`, `image_repository`). Every child is
named from the component's name and parented to it; nothing here reads config.

Why the image: Microsoft's Ubuntu 22.04 HPC image (microsoft-dsvm/ubuntu-hpc/2204) is
the N-series image Azure itself builds and validates: NVIDIA driver, CUDA, fabric
manager (the NVSwitch on ND96asr_v4 needs it), DCGM, Moby and the NVIDIA container
toolkit come preinstalled, so a box is ready in a minute or two and carries no
marketplace plan. Installing the driver on stock Ubuntu at first boot (the NVIDIA GPU
driver extension, or ubuntu-drivers) adds 5-10 minutes to every new box; cloud-init's
setup script still does that as a fallback when it finds no driver.
"""

from __future__ import annotations

import datetime
import re
import uuid

from pulumi_azure_native import (
    authorization,
    compute,
    consumption,
    containerregistry,
    devtestlab,
    network,
    resources,
    storage,
)

import pulumi
from infra.cloud_init import encode_user_data, render_cloud_init
from infra.config import StackConfig
from infra.time_zones import windows_time_zone

SSH_USER = "azureuser"
IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
CONTAINER_NAME = "training"
IMAGE_NAME = "glucose-trainer"
# Objects under tmp/ are scratch (partial uploads, staging); anything older than this is
# a leftover of a crashed writer and only costs money.
STALE_TEMP_DAYS = 2
VNET_CIDR = "10.42.0.0/16"
SUBNET_CIDR = "10.42.0.0/24"
SHUTDOWN_NOTICE_MINUTES = 15
ACTUAL_ALERT_PERCENTS = (50, 80, 100)
FORECAST_ALERT_PERCENTS = (100,)
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
# Stable namespace for the GUIDs Azure wants as role definition / assignment names.
_GUID_NAMESPACE = uuid.UUID("5b0f3c1e-8a52-4a4e-9d0c-6f1f2a7c9e31")


class AzureTrainingBox(pulumi.ComponentResource):
    """Resource group, network, `node_count` GPU VMs, storage, registry and guard rails."""

    hosts: pulumi.Output[list[str]]
    ssh_user: str
    storage_uri: pulumi.Output[str]
    registry: pulumi.Output[str]
    image_repository: pulumi.Output[str]

    def __init__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glucose-training:azure:TrainingBox", name, None, opts)
        self._name = name
        self._config = config
        self._tags = config.tags
        keep = config.keep_storage_on_destroy
        # An Azure resource group deletes everything in it: keeping the storage means
        # keeping its group too. retain_on_delete, not protect: protect would make the
        # whole `pulumi destroy` fail and leave the GPU VM billing.
        self._group = resources.ResourceGroup(
            f"{name}-rg", location=config.region, tags=self._tags, opts=self._child(keep)
        )
        client = authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        self._subscription = client.subscription_id
        subnet = self._network()
        account, container = self._storage(keep)
        registry = self._registry()
        deallocate_role = self._deallocate_role()
        placement = self._placement_group()
        ips = []
        for index in range(config.node_count):
            vm, ip = self._box(index, subnet, placement)
            ips.append(ip.ip_address)
            principal = vm.identity.apply(lambda identity: identity.principal_id)
            self._grant(
                f"{name}-{index}-blob",
                principal,
                container.id,
                self._builtin(STORAGE_BLOB_DATA_CONTRIBUTOR),
                "ServicePrincipal",
            )
            self._grant(
                f"{name}-{index}-acrpull",
                principal,
                registry.id,
                self._builtin(ACR_PULL),
                "ServicePrincipal",
            )
            self._grant(
                f"{name}-{index}-deallocate",
                principal,
                vm.id,
                deallocate_role.id,
                "ServicePrincipal",
            )
            self._shutdown_schedule(index, vm)
        # Shared-key access is off, so whoever runs `pulumi up` reaches data and images
        # through their own identity (`fab upload-data`, `fab download`, `fab push`).
        self._grant(
            f"{name}-deployer-blob",
            client.object_id,
            container.id,
            self._builtin(STORAGE_BLOB_DATA_CONTRIBUTOR),
        )
        self._grant(
            f"{name}-deployer-acrpush", client.object_id, registry.id, self._builtin(ACR_PUSH)
        )
        self._budget()

        self.hosts = pulumi.Output.all(*ips).apply(list)
        self.ssh_user = SSH_USER
        self.storage_uri = pulumi.Output.concat("az://", account.name, "/", container.name)
        self.registry = registry.login_server
        self.image_repository = pulumi.Output.concat(registry.login_server, "/", IMAGE_NAME)
        self.register_outputs(
            {
                "hosts": self.hosts,
                "sshUser": self.ssh_user,
                "storageUri": self.storage_uri,
                "registry": self.registry,
                "imageRepository": self.image_repository,
            }
        )

    def _child(self, retain: bool = False, **kwargs) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, retain_on_delete=retain or None, **kwargs)

    def _builtin(self, role_guid: str) -> pulumi.Output[str]:
        return pulumi.Output.concat(
            "/subscriptions/",
            self._subscription,
            "/providers/Microsoft.Authorization/roleDefinitions/",
            role_guid,
        )

    def _network(self) -> network.Subnet:
        name, group = self._name, self._group
        nsg = network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=group.name,
            location=group.location,
            security_rules=[
                {
                    "name": "ssh-from-allowed-cidr",
                    "priority": 100,
                    "direction": "Inbound",
                    "access": "Allow",
                    "protocol": "Tcp",
                    "source_address_prefix": self._config.ssh_allowed_cidr,
                    "source_port_range": "*",
                    "destination_address_prefix": "*",
                    "destination_port_range": "22",
                }
            ],
            tags=self._tags,
            opts=self._child(),
        )
        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=group.name,
            location=group.location,
            address_space={"address_prefixes": [VNET_CIDR]},
            tags=self._tags,
            opts=self._child(),
        )
        return network.Subnet(
            f"{name}-subnet",
            resource_group_name=group.name,
            virtual_network_name=vnet.name,
            address_prefix=SUBNET_CIDR,
            network_security_group={"id": nsg.id},
            opts=self._child(),
        )

    def _storage(self, keep: bool) -> tuple[storage.StorageAccount, storage.BlobContainer]:
        group = self._group
        # Storage account names are global, 3-24 lowercase letters and digits: the
        # provider appends a random suffix to this logical name.
        account = storage.StorageAccount(
            f"{_alnum(self._name)[:13]}data",
            resource_group_name=group.name,
            location=group.location,
            kind="StorageV2",
            sku={"name": "Standard_LRS"},
            access_tier="Hot",
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            allow_blob_public_access=False,
            # Managed identity on the box and `az login` on a laptop cover every use.
            allow_shared_key_access=False,
            default_to_o_auth_authentication=True,
            allow_cross_tenant_replication=False,
            tags=self._tags,
            opts=self._child(keep),
        )
        container = storage.BlobContainer(
            f"{self._name}-container",
            resource_group_name=group.name,
            account_name=account.name,
            container_name=CONTAINER_NAME,
            public_access="None",
            opts=self._child(keep),
        )
        storage.ManagementPolicy(
            f"{self._name}-lifecycle",
            resource_group_name=group.name,
            account_name=account.name,
            management_policy_name="default",  # the only name Azure accepts
            policy={
                "rules": [
                    {
                        "name": "delete-stale-temporaries",
                        "enabled": True,
                        "type": "Lifecycle",
                        "definition": {
                            "filters": {
                                "blob_types": ["blockBlob"],
                                "prefix_match": [f"{CONTAINER_NAME}/tmp/"],
                            },
                            "actions": {
                                "base_blob": {
                                    "delete": {
                                        "days_after_modification_greater_than": STALE_TEMP_DAYS
                                    }
                                }
                            },
                        },
                    }
                ]
            },
            opts=self._child(keep),
        )
        return account, container

    def _registry(self) -> containerregistry.Registry:
        return containerregistry.Registry(
            f"{_alnum(self._name)[:30]}acr",  # global name, letters and digits only
            resource_group_name=self._group.name,
            location=self._group.location,
            sku={"name": "Basic"},
            admin_user_enabled=False,  # pulls by managed identity, pushes by `az login`
            tags=self._tags,
            opts=self._child(),
        )

    def _deallocate_role(self) -> authorization.RoleDefinition:
        # Custom roles may be assignable at a resource group at the narrowest; each VM's
        # assignment is then scoped to that VM alone.
        group_name = self._group.name
        return authorization.RoleDefinition(
            f"{self._name}-deallocate-role",
            scope=self._group.id,
            role_definition_id=group_name.apply(lambda g: _guid(g, "deallocate-role")),
            role_name=pulumi.Output.concat(
                "glucose-training VM self-deallocate (", group_name, ")"
            ),
            description="Lets a training VM's idle watchdog deallocate that VM, nothing else.",
            role_type="CustomRole",
            permissions=[{"actions": list(DEALLOCATE_ACTIONS)}],
            assignable_scopes=[self._group.id],
            opts=self._child(),
        )

    def _grant(
        self,
        name: str,
        principal: pulumi.Input[str],
        scope: pulumi.Input[str],
        role: pulumi.Input[str],
        principal_type: str | None = None,
    ) -> authorization.RoleAssignment:
        return authorization.RoleAssignment(
            name,
            principal_id=principal,
            principal_type=principal_type,
            role_definition_id=role,
            scope=scope,
            # Deterministic GUID like Bicep's guid(scope, principal, role): re-running
            # never creates a duplicate assignment.
            role_assignment_name=pulumi.Output.all(scope, principal, role).apply(
                lambda parts: _guid(*parts)
            ),
            opts=self._child(),
        )

    def _placement_group(self) -> compute.ProximityPlacementGroup | None:
        if self._config.node_count < 2:
            return None
        # Keeps multi-node boxes in one datacenter for low-latency DDP traffic.
        return compute.ProximityPlacementGroup(
            f"{self._name}-ppg",
            resource_group_name=self._group.name,
            location=self._group.location,
            proximity_placement_group_type="Standard",
            tags=self._tags,
            opts=self._child(),
        )

    def _box(
        self, index: int, subnet: network.Subnet, placement: compute.ProximityPlacementGroup | None
    ) -> tuple[compute.VirtualMachine, network.PublicIPAddress]:
        name, group, config = f"{self._name}-{index}", self._group, self._config
        ip = network.PublicIPAddress(
            f"{name}-ip",
            resource_group_name=group.name,
            location=group.location,
            sku={"name": "Standard"},
            public_ip_allocation_method="Static",
            public_ip_address_version="IPv4",
            tags=self._tags,
            opts=self._child(),
        )
        nic = network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=group.name,
            location=group.location,
            ip_configurations=[
                {
                    "name": "primary",
                    "subnet": {"id": subnet.id},
                    "public_ip_address": {"id": ip.id},
                    "private_ip_allocation_method": "Dynamic",
                }
            ],
            tags=self._tags,
            opts=self._child(),
        )
        cloud_init = render_cloud_init(
            cloud="azure", idle_shutdown_minutes=config.idle_shutdown_minutes, ssh_user=SSH_USER
        )
        vm = compute.VirtualMachine(
            f"{name}-vm",
            vm_name=f"{name}-vm",  # fixed: the shutdown schedule's name is derived from it
            resource_group_name=group.name,
            location=group.location,
            hardware_profile={"vm_size": config.vm_size},
            identity={"type": "SystemAssigned"},
            storage_profile={
                "image_reference": IMAGE,
                "os_disk": {
                    "create_option": "FromImage",
                    "delete_option": "Delete",
                    "disk_size_gb": config.os_disk_size_gb,
                    "caching": "ReadWrite",
                    "managed_disk": {"storage_account_type": "Premium_LRS"},
                },
            },
            os_profile={
                "computer_name": f"{name}-vm",
                "admin_username": SSH_USER,
                "custom_data": encode_user_data(cloud_init),
                "linux_configuration": {
                    "disable_password_authentication": True,
                    "ssh": {
                        "public_keys": [
                            {
                                "path": f"/home/{SSH_USER}/.ssh/authorized_keys",
                                "key_data": config.ssh_public_key,
                            }
                        ]
                    },
                },
            },
            network_profile={"network_interfaces": [{"id": nic.id, "primary": True}]},
            proximity_placement_group={"id": placement.id} if placement else None,
            **_priority(config.spot),
            tags=self._tags,
            opts=self._child(),
        )
        return vm, ip

    def _shutdown_schedule(self, index: int, vm: compute.VirtualMachine) -> None:
        config = self._config
        devtestlab.GlobalSchedule(
            f"{self._name}-{index}-shutdown",
            # Azure recognises auto-shutdown only under exactly this name.
            name=vm.name.apply(lambda vm_name: f"shutdown-computevm-{vm_name}"),
            resource_group_name=self._group.name,
            location=self._group.location,
            status="Enabled",  # the SDK's default is Disabled
            task_type="ComputeVmShutdownTask",
            daily_recurrence={"time": config.auto_shutdown_time.replace(":", "")},
            time_zone_id=windows_time_zone(config.auto_shutdown_time_zone),
            target_resource_id=vm.id,
            notification_settings={
                "status": "Enabled",
                "time_in_minutes": SHUTDOWN_NOTICE_MINUTES,
                "email_recipient": ";".join(config.alert_emails),
                "notification_locale": "en",
            },
            tags=self._tags,
            opts=self._child(),
        )

    def _budget(self) -> None:
        config = self._config
        notifications = {
            f"{kind.lower()}{percent}": {
                "enabled": True,
                "operator": "GreaterThanOrEqualTo",
                "threshold": percent,
                "threshold_type": kind,
                "contact_emails": list(config.alert_emails),
                "locale": "en-us",
            }
            for kind, percents in (
                ("Actual", ACTUAL_ALERT_PERCENTS),
                ("Forecasted", FORECAST_ALERT_PERCENTS),
            )
            for percent in percents
        }
        consumption.Budget(
            f"{self._name}-budget",
            budget_name=f"{config.project}-{config.stack}-monthly",
            scope=self._group.id,
            amount=config.budget_amount,
            category="Cost",
            time_grain="Monthly",
            # Azure wants the first of a month; later runs must not move it.
            time_period={"start_date": _first_of_this_month()},
            notifications=notifications,
            opts=self._child(ignore_changes=["timePeriod"]),
        )


def _priority(spot: bool) -> dict:
    if not spot:
        return {"priority": "Regular"}
    # Max price -1: pay up to the on-demand price, never evicted for price, only for
    # capacity. Deallocate keeps the disk, so the box comes back with its checkpoints.
    return {
        "priority": "Spot",
        "eviction_policy": "Deallocate",
        "billing_profile": {"max_price": -1},
    }


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _guid(*parts: str) -> str:
    return str(uuid.uuid5(_GUID_NAMESPACE, "/".join(parts)))


def _first_of_this_month() -> str:
    today = datetime.datetime.now(datetime.timezone.utc)
    return today.strftime("%Y-%m-01T00:00:00Z")
