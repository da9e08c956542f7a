"""The AWS box's own small network: VPC, a public subnet per zone, gateway, security groups.

Why not the default VPC: many accounts deleted it (and organisations often forbid
it), its subnets sit in zones that may not sell p4d/p5, and anything we add to it
outlives `pulumi destroy`. Our own VPC costs nothing, has a subnet in every zone a
candidate may go to (EC2 Fleet picks the zone: infra/aws/boxes.py), and goes away
with the stack. A subnet is named and numbered after its zone's letter, never after
its place in `zones`: reordering the list replaces nothing.

Two security groups: `-ssh` (SSH from sshAllowedCidr) on box 0 only, the one box
with an Elastic IP; with `nodeCount` > 1, `-nodes` on every box, admitting all TCP
from its own members and nothing else: torchrun's rendezvous, NCCL and gloo pick
ports at run time, and `fab` reaches the other boxes' sshd through box 0. Every box
takes an AWS-assigned public IPv4 at launch (a fleet launches every box alike) for its
outbound traffic (image pulls, S3, the CloudWatch metric the idle alarm reads); box
0's Elastic IP replaces its own. No Elastic IP for the others, so not in the quota of
5 per region, and no rule admits anything from outside the group to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from stack.config import StackConfig

VPC_CIDR = "10.42.0.0/16"
# Zone `a` gets 10.42.16.0/24, `b` 10.42.17.0/24...: apart from the single subnet of
# stacks made before issue 40 (10.42.0.0/24), which goes once the boxes left it.
FIRST_ZONE_SUBNET = 16
ANYWHERE_CIDR = "0.0.0.0/0"
SSH_PORT = 22


# EC2 takes only a-zA-Z0-9, spaces and ._-:/()#,@[]+=&;{}!$* in a group's description, and
# no & in a rule's (tests/pulumi/test_cloud_references.py checks both against the API).
NODES_DESCRIPTION = "glucose-training boxes: all TCP between the boxes of this stack, all egress"
NODES_RULE_DESCRIPTION = "torchrun, NCCL, gloo and SSH between the boxes of this stack"
ALL_EGRESS = [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [ANYWHERE_CIDR]}]


@dataclass(frozen=True)
class AwsNetwork:
    subnets: dict[str, aws.ec2.Subnet]
    """Zone -> the stack's subnet there, one for each zone a candidate is in."""
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
    name: str,
    config: StackConfig,
    zones: tuple[str, ...],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> AwsNetwork:
    """VPC, a public subnet in each of `zones`, route, security groups."""
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
    routes = aws.ec2.RouteTable(
        f"{name}-routes",
        vpc_id=vpc.id,
        routes=[{"cidr_block": ANYWHERE_CIDR, "gateway_id": gateway.id}],
        tags=tags,
        opts=child,
    )
    subnets = {}
    for zone in zones:
        subnets[zone] = aws.ec2.Subnet(
            f"{name}-subnet-{zone}",
            vpc_id=vpc.id,
            cidr_block=zone_cidr(zone),
            availability_zone=zone,
            # A fleet launches every box alike: each takes a public address at launch
            # (box 0's Elastic IP replaces its own).
            map_public_ip_on_launch=True,
            tags=tags,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-routes-{zone}",
            subnet_id=subnets[zone].id,
            route_table_id=routes.id,
            opts=child,
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
    return AwsNetwork(subnets, security_group, gateway, nodes_group)


def zone_cidr(zone: str) -> str:
    """The subnet of `zone` (us-east-1b -> 10.42.17.0/24): from its letter alone."""
    letter = ord(zone[-1].lower()) - ord("a")
    return f"10.42.{FIRST_ZONE_SUBNET + letter}.0/24"
