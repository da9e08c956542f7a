"""The Azure boxes' network: VNet, one subnet, an NSG, box 0's public address, NICs.

Only box 0 has a public address (SSH from sshAllowedCidr); the boxes reach each other
inside the subnet on any TCP port (torchrun, NCCL, gloo, and `fab`'s SSH hop through
box 0). Azure's default AllowVnetInBound would admit that too; the rule says it rather
than lean on a default. Boxes 1..N-1 reach the internet (ACR, storage, ARM for the
watchdog's deallocate) through the subnet's default outbound access, stated for
several boxes: newer network API versions make new subnets private by default, and
the setting only takes at the subnet's creation.
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import network, resources

from stack.config import StackConfig

VNET_CIDR = "10.42.0.0/16"
SUBNET_CIDR = "10.42.0.0/24"
SSH_PORT = "22"


def declare_network(
    name: str,
    config: StackConfig,
    group: resources.ResourceGroup,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> network.Subnet:
    """VNet, subnet and NSG: SSH from sshAllowedCidr, any TCP between the boxes."""
    child = pulumi.ResourceOptions(parent=parent)
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
                "source_address_prefix": config.ssh_allowed_cidr,
                "source_port_range": "*",
                "destination_address_prefix": "*",
                "destination_port_range": SSH_PORT,
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
        tags=tags,
        opts=child,
    )
    vnet = network.VirtualNetwork(
        f"{name}-vnet",
        resource_group_name=group.name,
        location=group.location,
        address_space={"address_prefixes": [VNET_CIDR]},
        tags=tags,
        opts=child,
    )
    return network.Subnet(
        f"{name}-subnet",
        resource_group_name=group.name,
        virtual_network_name=vnet.name,
        address_prefix=SUBNET_CIDR,
        network_security_group={"id": nsg.id},
        default_outbound_access=True if config.node_count > 1 else None,
        opts=child,
    )


def declare_public_ip(
    name: str, group: resources.ResourceGroup, tags: dict[str, str], parent: pulumi.Resource
) -> network.PublicIPAddress:
    """The stack's one public address, box 0's: `fab` reaches the others through it."""
    return network.PublicIPAddress(
        f"{name}-ip",
        resource_group_name=group.name,
        location=group.location,
        sku={"name": "Standard"},
        public_ip_allocation_method="Static",
        public_ip_address_version="IPv4",
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def declare_nic(
    name: str,
    group: resources.ResourceGroup,
    subnet: network.Subnet,
    public_ip: network.PublicIPAddress | None,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> network.NetworkInterface:
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
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def private_ip(nic: network.NetworkInterface) -> pulumi.Output[str]:
    return nic.ip_configurations.apply(lambda configurations: configurations[0].private_ip_address)
