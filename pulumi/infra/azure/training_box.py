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
firmware trusts, so Secure Boot would keep the GPU driver from loading. Only the sizes
Microsoft lists with Trusted Launch get it: no offline reference says which sizes (or
images) support it, and asking for it on one that does not fails at create time, while
leaving it unset boots the standard way (api 2024-11-01: "UefiSettings will not be
enabled unless this property is set"). ND A100 v4 is not listed.

A routine `pulumi up` never replaces a VM for changed box programs or settings: Azure
cannot change `customData` in place, so it is ignored on existing VMs, and
`fab box-update` brings programs and settings to running boxes.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import authorization, compute, network, resources

from infra.azure import access, guard_rails, keeper
from infra.azure.box_programs import BoxProgramsBlob
from infra.azure.network import declare_network, declare_nic, declare_public_ip, private_ip
from infra.azure.registry import IMAGE_NAME, declare_registry
from infra.azure.storage import declare_storage
from infra.placement import Plan, plan
from infra.training_box import TrainingBox, box_user_data
from stack import box_packing, catalog
from stack.config import StackConfig
from stack.outputs import StackOutput
from stack.placement import NOT_TRIED, SPOT

SSH_USER = "azureuser"
IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}
# Sizes Microsoft lists with Trusted Launch: one list, the catalog's, which a fallback
# size must agree with too (stack/cloud_limits.py).
TRUSTED_LAUNCH_SIZES = catalog.TRUSTED_LAUNCH_SIZES


class AzureTrainingBox(TrainingBox):
    """Resource group, network, `node_count` GPU VMs, storage, registry and guard rails."""

    CLOUD = "azure"

    def __init__(
        self,
        name: str,
        config: StackConfig,
        candidates: Plan | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(name, config, opts)
        self._plan = candidates or plan(config, {})
        tags = self._tags
        # An Azure resource group deletes everything in it: keeping the storage means
        # keeping its group too. retain_on_delete, not protect: protect would make the
        # whole `pulumi destroy` fail and leave the GPU VM billing.
        self._group = group = resources.ResourceGroup(
            f"{name}-rg",
            location=config.region,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, retain_on_delete=config.keep_storage_on_destroy or None
            ),
        )
        subnet = declare_network(name, config, group, tags, self)
        account, container = declare_storage(name, config, group, self)
        registry = declare_registry(name, group, tags, self)
        client = authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        deployer_data = access.declare_deployer_access(
            name, container, registry, client, self._deployer_principal_type(), self
        )
        programs = box_packing.build_programs()
        programs_blob = BoxProgramsBlob(
            f"{name}-box-programs",
            account.name,
            container.name,
            programs,
            pulumi.ResourceOptions(parent=self, depends_on=[deployer_data]),
        )
        storage_uri = pulumi.Output.concat("az://", account.name, "/", container.name)
        user_data = box_user_data(config, SSH_USER, storage_uri, programs)
        placement = self._placement_group()
        public_ip = declare_public_ip(f"{name}-0", group, tags, self)
        vms, nics, stops = [], [], []
        for index in range(config.node_count):
            box = f"{name}-{index}"
            nic = declare_nic(box, group, subnet, public_ip if index == 0 else None, tags, self)
            vms.append(self._vm(box, nic, placement, user_data, programs_blob))
            nics.append(nic)
            stops.append(
                guard_rails.declare_daily_stop(f"{box}-shutdown", vms[-1], group, config, self)
            )
        access.declare_box_access(name, vms, container, registry, client, self)
        keeper.declare_keeper(
            f"{name}-keeper", vms, stops, group, client.subscription_id, config, self
        )
        stop_group = None
        if config.budget_stops_boxes:
            stop_group = guard_rails.declare_budget_stop(
                f"{name}-budget-stop", vms, group, client.subscription_id, config, self
            )
        guard_rails.declare_budget(f"{name}-budget", group, config, self, stop_group)
        guard_rails.declare_still_billed_alert(f"{name}-still-billed", group, config, self)

        self._expose(
            hosts=pulumi.Output.all(public_ip.ip_address).apply(list),
            private_hosts=pulumi.Output.all(*[private_ip(nic) for nic in nics]).apply(list),
            box_ids=pulumi.Output.all(*[vm.id for vm in vms]).apply(list),
            ssh_user=SSH_USER,
            storage_uri=storage_uri,
            registry=registry.login_server,
            image_repository=pulumi.Output.concat(registry.login_server, "/", IMAGE_NAME),
            placement=self._taken(vms[0]),
            placement_tried=self._tried(),
            # What `fab` turns off for a run past the nightly stop (and back on).
            cloud_outputs={
                StackOutput.DAILY_STOP_SCHEDULES: pulumi.Output.all(*[s.id for s in stops]).apply(
                    list
                )
            },
        )

    def _taken(self, vm: compute.VirtualMachine) -> pulumi.Output[dict[str, str]]:
        """The size and zone Azure gave box 0 (its zone is Azure's choice) and the market."""
        market = self._plan.first.market

        def taken(args: list) -> dict[str, str]:
            hardware, zones = args
            size = (hardware or {}).get("vm_size") or self._plan.first.size
            return {"size": size, "zone": (zones or [""])[0], "market": market}

        return pulumi.Output.all(vm.hardware_profile, vm.zones).apply(taken)

    def _tried(self) -> list[dict[str, str]]:
        """Every candidate: dropped before the VM (and why), the first left taken."""
        first = self._plan.first
        return [
            t.to_json()
            if t.refusal or t.candidate == first
            else {**t.to_json(), "refusal": NOT_TRIED}
            for t in self._plan.every
        ]

    def _deployer_principal_type(self) -> pulumi.Input[str]:
        """The stack's `deployerPrincipalType`, else read from the deployer's own token."""
        if self._config.deployer_principal_type:
            return self._config.deployer_principal_type
        token = authorization.get_client_token(opts=pulumi.InvokeOptions(parent=self)).token
        return access.principal_type_of_token(token)

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
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _vm(
        self,
        name: str,
        nic: network.NetworkInterface,
        placement: compute.ProximityPlacementGroup | None,
        user_data: pulumi.Output[str],
        programs: BoxProgramsBlob,
    ) -> compute.VirtualMachine:
        """One box; it boots after the programs' archive is in the container. Its size is
        the first candidate left (infra/placement.py), its zone Azure's pick among those
        selling it (`placement`); a later size (`fab start` resizing in place) or zone
        list is never undone by a routine `pulumi up`."""
        group, config, size = self._group, self._config, self._plan.first.size
        zones = self._plan.azure_zones.get(size) or ()
        return compute.VirtualMachine(
            f"{name}-vm",
            vm_name=f"{name}-vm",  # fixed: the shutdown schedule's name is derived from it
            resource_group_name=group.name,
            location=group.location,
            hardware_profile={"vm_size": size},
            # Azure picks a zone with room among these (api 2024-11-01).
            placement={"zone_placement_policy": "Any", "include_zones": list(zones)}
            if zones
            else None,
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
                "custom_data": user_data,
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
            security_profile=security_profile(size),
            **_priority(self._plan.first.market == SPOT),
            tags=self._tags,
            # customData and placement cannot change in place: a new one would replace the
            # VM; and `fab start` may have resized it (its disk kept): keep its size.
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["osProfile.customData", "hardwareProfile.vmSize", "placement"],
                depends_on=[programs],
            ),
        )


def security_profile(vm_size: str) -> dict | None:
    """Trusted Launch without Secure Boot (see the module docstring) on the sizes listed
    with it; None (the standard security type) on any other."""
    if vm_size not in TRUSTED_LAUNCH_SIZES:
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
