"""`cloud: azure` — N GPU boxes with guard rails, private storage and a registry.

One ComponentResource, `AzureTrainingBox`, with the same public shape as the AWS one
(`training_box.TrainingBox`). Every child is
named from the component's name and parented to it; nothing here reads config.

Why the image: Microsoft's Ubuntu 22.04 HPC image (microsoft-dsvm/ubuntu-hpc/2204) is
the N-series image Azure itself builds and validates: NVIDIA driver, CUDA, fabric
manager (the NVSwitch on ND96asr_v4 needs it), DCGM, Moby and the NVIDIA container
toolkit come preinstalled, so a box is ready in a minute or two and carries no
marketplace plan. Installing the driver on stock Ubuntu at first boot (the NVIDIA GPU
driver extension, or ubuntu-drivers) adds 5-10 minutes to every new box; cloud-init's
setup script still does that as a fallback when it finds no driver.

Security type, stated rather than left to the subscription's default (new Gen2 VMs
default to Trusted Launch with Secure Boot on some subscriptions): Trusted Launch with
a vTPM but Secure Boot off, because the image's NVIDIA kernel modules (and the
setup script's fallback driver) are built by DKMS and not signed with a key the
firmware trusts, so Secure Boot would keep the GPU driver from loading. ND A100 v4 does
not offer Trusted Launch and boots the standard way.

A routine `pulumi up` never replaces a VM for changed box programs or settings: Azure
cannot change `customData` in place, so it is ignored on existing VMs, and
`fab box-update` brings programs and settings to running boxes.
"""

from __future__ import annotations

import re

import pulumi
from pulumi_azure_native import (
    authorization,
    compute,
    containerregistry,
    network,
    resources,
    storage,
)

from box.cloud_init import box_guard_settings, encode_user_data, render_cloud_init
from infra.azure.access import (
    ACR_PULL,
    ACR_PUSH,
    POWER_ON_OFF,
    SERVICE_PRINCIPAL,
    STORAGE_BLOB_DATA_CONTRIBUTOR,
    builtin_role,
    grant,
    principal_type_of_token,
)
from infra.azure.guard_rails import (
    budget_stop,
    monthly_budget,
    shutdown_schedule,
    still_billed_alert,
)
from infra.training_box import TrainingBox
from stack.config import StackConfig

SSH_USER = "azureuser"
IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
CONTAINER_NAME = "training"
IMAGE_NAME = "glucose-trainer"
# Objects under tmp/ are scratch (partial uploads, staging); anything older than this is
# a leftover of a crashed writer and only costs money.
STALE_TEMP_DAYS = 2
# Soft delete and versioning: a bad sync or a hostile writer cannot destroy the only
# copy of a checkpoint; what they overwrite or delete stays restorable this long.
DELETED_BLOB_RETENTION_DAYS = 14
OLD_VERSION_DAYS = 14
# Sizes without Trusted Launch (https://learn.microsoft.com/azure/virtual-machines/trusted-launch).
NO_TRUSTED_LAUNCH_SIZES = ("Standard_ND96asr_v4",)
VNET_CIDR = "10.42.0.0/16"
SUBNET_CIDR = "10.42.0.0/24"


class AzureTrainingBox(TrainingBox):
    """Resource group, network, `node_count` GPU VMs, storage, registry and guard rails."""

    CLOUD = "azure"

    def __init__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(name, config, opts)
        keep = config.keep_storage_on_destroy
        # An Azure resource group deletes everything in it: keeping the storage means
        # keeping its group too. retain_on_delete, not protect: protect would make the
        # whole `pulumi destroy` fail and leave the GPU VM billing.
        self._group = resources.ResourceGroup(
            f"{name}-rg", location=config.region, tags=self._tags, opts=self._child(keep)
        )
        subnet = self._network()
        account, container = self._storage(keep)
        registry = self._registry()
        placement = self._placement_group()
        public_ip = self._public_ip(f"{name}-0")
        vms, nics = [], []
        for index in range(config.node_count):
            vm, nic = self._box(index, subnet, placement, public_ip if index == 0 else None)
            vms.append(vm)
            nics.append(nic)
            shutdown_schedule(f"{name}-{index}-shutdown", vm, self._group, config, self)
        client = authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        self._grant_access(vms, container, registry, client)
        stop_group = None
        if config.budget_stops_boxes:
            stop_group = budget_stop(
                f"{name}-budget-stop", vms, self._group, client.subscription_id, config, self
            )
        monthly_budget(f"{name}-budget", self._group, config, self, stop_group)
        still_billed_alert(f"{name}-still-billed", self._group, config, self)

        self._expose(
            hosts=pulumi.Output.all(public_ip.ip_address).apply(list),
            private_hosts=pulumi.Output.all(*[_private_ip(nic) for nic in nics]).apply(list),
            ssh_user=SSH_USER,
            storage_uri=pulumi.Output.concat("az://", account.name, "/", container.name),
            registry=registry.login_server,
            image_repository=pulumi.Output.concat(registry.login_server, "/", IMAGE_NAME),
        )

    def _child(self, retain: bool = False) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, retain_on_delete=retain or None)

    def _grant_access(
        self,
        vms: list[compute.VirtualMachine],
        container: storage.BlobContainer,
        registry: containerregistry.Registry,
        client: pulumi.Output,
    ) -> None:
        """Each box: data, image pulls, deallocating itself. The deployer: data, pushes."""
        blob_role = builtin_role(client.subscription_id, STORAGE_BLOB_DATA_CONTRIBUTOR)
        power_role = builtin_role(client.subscription_id, POWER_ON_OFF)
        pull_role = builtin_role(client.subscription_id, ACR_PULL)
        for index, vm in enumerate(vms):
            box = vm.identity.apply(lambda identity: identity.principal_id)
            prefix, kind = f"{self._name}-{index}", SERVICE_PRINCIPAL
            grant(f"{prefix}-blob", box, container.id, blob_role, self, kind)
            grant(f"{prefix}-acrpull", box, registry.id, pull_role, self, kind)
            grant(f"{prefix}-deallocate", box, vm.id, power_role, self, kind)
        # Shared-key access is off, so whoever runs `pulumi up` reaches data and images
        # through their own identity (`fab upload-data`, `fab download`, `fab push`).
        deployer, kind = client.object_id, self._deployer_principal_type()
        grant(f"{self._name}-deployer-blob", deployer, container.id, blob_role, self, kind)
        push_role = builtin_role(client.subscription_id, ACR_PUSH)
        grant(f"{self._name}-deployer-acrpush", deployer, registry.id, push_role, self, kind)

    def _deployer_principal_type(self) -> str:
        """The stack's `deployerPrincipalType`, else read from the deployer's own token."""
        if self._config.deployer_principal_type:
            return self._config.deployer_principal_type
        token = authorization.get_client_token(opts=pulumi.InvokeOptions(parent=self)).token
        return principal_type_of_token(token)

    def _network(self) -> network.Subnet:
        """VNet, subnet and NSG. Only box 0 has a public address (SSH from
        sshAllowedCidr); the boxes reach each other inside the subnet on any TCP port
        (torchrun, NCCL, gloo, and `fab`'s SSH hop through box 0). Azure's default
        AllowVnetInBound would admit that too; the rule says it rather than lean on a
        default. Boxes 1..N-1 reach the internet (ACR, storage, ARM for the watchdog's
        deallocate) through the subnet's default outbound access, stated for several
        boxes: newer network API versions make new subnets private by default, and the
        setting only takes at the subnet's creation."""
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
                },
                {
                    "name": "boxes-within-subnet",
                    "priority": 110,
                    "direction": "Inbound",
                    "access": "Allow",
                    "protocol": "Tcp",
                    "source_address_prefix": SUBNET_CIDR,
                    "source_port_range": "*",
                    "destination_address_prefix": SUBNET_CIDR,
                    "destination_port_range": "*",
                },
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
            default_outbound_access=True if self._config.node_count > 1 else None,
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
            tags=self._config.storage_tags,
            opts=self._child(keep),
        )
        storage.BlobServiceProperties(
            f"{self._name}-blob-recovery",
            resource_group_name=group.name,
            account_name=account.name,
            blob_services_name="default",  # the only name Azure accepts
            is_versioning_enabled=True,
            delete_retention_policy={"enabled": True, "days": DELETED_BLOB_RETENTION_DAYS},
            container_delete_retention_policy={
                "enabled": True,
                "days": DELETED_BLOB_RETENTION_DAYS,
            },
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
                    },
                    {
                        # Versioning protects against a bad overwrite; old versions of
                        # checkpoints then age out instead of billing forever.
                        "name": "delete-old-versions",
                        "enabled": True,
                        "type": "Lifecycle",
                        "definition": {
                            "filters": {"blob_types": ["blockBlob"]},
                            "actions": {
                                "version": {
                                    "delete": {"days_after_creation_greater_than": OLD_VERSION_DAYS}
                                }
                            },
                        },
                    },
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
        self,
        index: int,
        subnet: network.Subnet,
        placement: compute.ProximityPlacementGroup | None,
        public_ip: network.PublicIPAddress | None,
    ) -> tuple[compute.VirtualMachine, network.NetworkInterface]:
        name = f"{self._name}-{index}"
        nic = self._nic(name, subnet, public_ip)
        return self._vm(name, nic, placement), nic

    def _public_ip(self, name: str) -> network.PublicIPAddress:
        """The stack's one public address, box 0's: `fab` reaches the others through it."""
        group = self._group
        return network.PublicIPAddress(
            f"{name}-ip",
            resource_group_name=group.name,
            location=group.location,
            sku={"name": "Standard"},
            public_ip_allocation_method="Static",
            public_ip_address_version="IPv4",
            tags=self._tags,
            opts=self._child(),
        )

    def _nic(
        self, name: str, subnet: network.Subnet, public_ip: network.PublicIPAddress | None
    ) -> network.NetworkInterface:
        group = self._group
        ip_configuration = {
            "name": "primary",
            "subnet": {"id": subnet.id},
            "private_ip_allocation_method": "Dynamic",
        }
        if public_ip is not None:
            ip_configuration["public_ip_address"] = {"id": public_ip.id}
        return network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=group.name,
            location=group.location,
            ip_configurations=[ip_configuration],
            tags=self._tags,
            opts=self._child(),
        )

    def _vm(
        self,
        name: str,
        nic: network.NetworkInterface,
        placement: compute.ProximityPlacementGroup | None,
    ) -> compute.VirtualMachine:
        group, config = self._group, self._config
        cloud_init = render_cloud_init(
            cloud="azure", ssh_user=SSH_USER, **box_guard_settings(config)
        )
        return compute.VirtualMachine(
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
            security_profile=security_profile(config.vm_size),
            **_priority(config.spot),
            tags=self._tags,
            # customData cannot change in place: a new one would replace the VM.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["osProfile.customData"]),
        )


def security_profile(vm_size: str) -> dict | None:
    """Trusted Launch without Secure Boot (see the module docstring), where offered."""
    if vm_size in NO_TRUSTED_LAUNCH_SIZES:
        return None
    return {
        "security_type": "TrustedLaunch",
        "uefi_settings": {"secure_boot_enabled": False, "v_tpm_enabled": True},
    }


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


def _private_ip(nic: network.NetworkInterface) -> pulumi.Output[str]:
    return nic.ip_configurations.apply(lambda configurations: configurations[0].private_ip_address)


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())
