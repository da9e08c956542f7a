"""The AWS box's own small network: VPC, one public subnet, gateway, security groups.

Why not the default VPC: many accounts deleted it (and organisations often forbid
it), its subnets sit in zones that may not sell p4d/p5, and anything we add to it
outlives `pulumi destroy`. Our own VPC costs nothing, puts the subnet in a zone that
offers the instance type, and goes away with the stack.

Two security groups: `-ssh` (SSH from sshAllowedCidr) on box 0 only, the one box
with an Elastic IP; with `nodeCount` > 1, `-nodes` on every box, admitting all TCP
from its own members and nothing else: torchrun's rendezvous, NCCL and gloo pick
ports at run time, and `fab` reaches the other boxes' sshd through box 0. Boxes 1..N-1
take an AWS-assigned public IPv4 for their outbound traffic alone (image pulls, S3,
the CloudWatch metric the idle alarm reads): no Elastic IP, so not in the quota of 5
per region, and no rule admits anything from outside the group to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from stack.config import StackConfig

VPC_CIDR = "10.42.0.0/16"
SUBNET_CIDR = "10.42.0.0/24"
ANYWHERE_CIDR = "0.0.0.0/0"
SSH_PORT = 22


# EC2 takes only a-zA-Z0-9, spaces and ._-:/()#,@[]+=&;{}!$* in a group's description, and
# no & in a rule's (tests/pulumi/test_cloud_references.py checks both against the API).
NODES_DESCRIPTION = "glucose-training boxes: all TCP between the boxes of this stack, all egress"
NODES_RULE_DESCRIPTION = "torchrun, NCCL, gloo and SSH between the boxes of this stack"
ALL_EGRESS = [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [ANYWHERE_CIDR]}]


@dataclass(frozen=True)
class AwsNetwork:
    subnet: aws.ec2.Subnet
    security_group: aws.ec2.SecurityGroup
    """SSH from sshAllowedCidr: box 0's alone."""
    internet_gateway: aws.ec2.InternetGateway
    """Elastic IPs depend on it: AWS wants the gateway before the address."""
    nodes_group: aws.ec2.SecurityGroup | None = None
    """Every box's when there are several: the boxes reach each other on any TCP port."""

    def groups(self, index: int) -> list[pulumi.Output[str]]:
        """Security group ids of box `index`: only box 0 admits SSH from outside."""
        ssh = [self.security_group.id] if index == 0 else []
        return ssh + ([self.nodes_group.id] if self.nodes_group is not None else [])


def declare_network(
    name: str, config: StackConfig, tags: dict[str, str], parent: pulumi.Resource
) -> AwsNetwork:
    """VPC, public subnet in a zone offering `config.vm_size`, route, security group."""
    child = pulumi.ResourceOptions(parent=parent)
    vpc = aws.ec2.Vpc(
        f"{name}-vpc",
        cidr_block=VPC_CIDR,
        enable_dns_support=True,
        enable_dns_hostnames=True,
        tags=tags,
        opts=child,
    )
    gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags, opts=child)
    subnet = aws.ec2.Subnet(
        f"{name}-subnet",
        vpc_id=vpc.id,
        cidr_block=SUBNET_CIDR,
        availability_zone=_zone_offering(config, parent),
        map_public_ip_on_launch=False,  # box 0's Elastic IP; the others ask for theirs
        tags=tags,
        opts=child,
    )
    routes = aws.ec2.RouteTable(
        f"{name}-routes",
        vpc_id=vpc.id,
        routes=[{"cidr_block": ANYWHERE_CIDR, "gateway_id": gateway.id}],
        tags=tags,
        opts=child,
    )
    aws.ec2.RouteTableAssociation(
        f"{name}-routes-subnet", subnet_id=subnet.id, route_table_id=routes.id, opts=child
    )
    security_group = aws.ec2.SecurityGroup(
        f"{name}-ssh",
        description="glucose-training box: SSH from sshAllowedCidr, all egress",
        vpc_id=vpc.id,
        ingress=[
            {
                "description": "SSH from sshAllowedCidr only",
                "protocol": "tcp",
                "from_port": SSH_PORT,
                "to_port": SSH_PORT,
                "cidr_blocks": [config.ssh_allowed_cidr],
            }
        ],
        egress=ALL_EGRESS,
        tags=tags,
        opts=child,
    )
    nodes_group = None
    if config.node_count > 1:
        nodes_group = aws.ec2.SecurityGroup(
            f"{name}-nodes",
            description=NODES_DESCRIPTION,
            vpc_id=vpc.id,
            ingress=[
                {
                    "description": NODES_RULE_DESCRIPTION,
                    "protocol": "tcp",
                    "from_port": 0,
                    "to_port": 65535,
                    "self": True,
                }
            ],
            egress=ALL_EGRESS,
            tags=tags,
            opts=child,
        )
    return AwsNetwork(subnet, security_group, gateway, nodes_group)


def _zone_offering(config: StackConfig, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The first availability zone (by name) where the region sells this size."""
    offerings = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": [config.vm_size]}],
        opts=pulumi.InvokeOutputOptions(parent=parent),
    )

    def first_zone(zones: list[str]) -> str:
        if not zones:
            raise ValueError(
                f"no availability zone in {config.region} offers {config.vm_size} to this "
                "account; pick another aws:region or vmSize (`fab plan` lists the options)"
            )
        return sorted(zones)[0]

    return offerings.locations.apply(first_zone)
