"""One GPU training box (or a cluster of `nodeCount`) on AWS, with its guard rails.

The same public shape as the Azure component (`infra.training_box.TrainingBox`), and
the same parts beside it, one module each. What it declares, all tagged
project/stack/owner:

- a small VPC of its own with an SSH-only security group for box 0 and, for several
  boxes, one that lets them reach each other (`network.py` says why not the default
  VPC); the EC2 key pair from `sshPublicKey`;
- the instances: AMI pinned (stack config `amiId`, else looked up once and kept),
  IMDSv2 only with hop limit 2 (the trainer container reads spot notices), OS
  shutdown = stop, encrypted gp3 root, optional persistent spot that stops instead of
  terminating (its request cancelled before the instance goes: spot_requests.py),
  the shared cloud-init, a cluster placement group for more than one; an Elastic IP for
  box 0 alone, the one `fab` connects to (`hosts`): the others are reached through it
  on their private addresses (`privateHosts`), so `nodeCount` stays clear of AWS's
  default quota of 5 Elastic IPs per region;
- an S3 bucket (private, encrypted, versioned, lifecycle-trimmed: `storage.py`) and an
  ECR repo (`registry.py`);
- an instance role: this bucket, this repository, one metric namespace (`access.py`),
  and the SNS topic that mails alertEmails when a run ends (`notify.py`);
- guard rails (`guard_rails.py`): an EventBridge Scheduler daily stop, a monthly
  budget with e-mail alerts that stops the boxes at 100 %, a CloudWatch alarm that
  stops a box whose GPUs stay idle.

A routine `pulumi up` never stops or replaces a box: a newer AMI and changed box
programs or settings (user data) are ignored on existing instances. cloud-init would
not re-run them anyway; `fab box-update` brings programs and settings to running boxes.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.aws import access, guard_rails
from infra.aws.network import AwsNetwork, declare_network
from infra.aws.notify import declare_notify
from infra.aws.registry import declare_registry
from infra.aws.spot_requests import SpotRequestGuard, spot_request_valid_until
from infra.aws.storage import declare_box_programs, declare_storage
from infra.training_box import TrainingBox, box_user_data
from stack import box_packing
from stack.config import StackConfig
from stack.outputs import StackOutput

SSH_USER = "ubuntu"

# AWS Deep Learning Base AMI: NVIDIA driver, CUDA, Docker and the container toolkit.
# Its open-source kernel module drives Turing (sm_75) and newer only, so Volta (p3,
# V100) boots plain Ubuntu 22.04 and the shared setup script installs the
# proprietary driver, docker and the toolkit there (box/setup-box.sh).
DLAMI_OWNER = "amazon"
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
UBUNTU_OWNER = "099720109477"  # Canonical
# Canonical names EBS images hvm-ssd/ or, newer ones, hvm-ssd-gp3/: match either.
UBUNTU_NAME = "ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-amd64-server-*"

IMDS_HOP_LIMIT = 2  # host -> docker bridge -> container: the trainer reads spot notices


class AwsTrainingBox(TrainingBox):
    """N GPU instances with storage, registry and every guard rail, under one name."""

    CLOUD = "aws"

    def __init__(
        self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(name, config, opts)
        network = declare_network(name, config, self._tags, parent=self)
        bucket = declare_storage(name, config, self)
        programs = box_packing.build_programs()
        programs_object = declare_box_programs(name, bucket, programs, self._tags, self)
        repository = declare_registry(name, self._tags, self)
        profile = access.declare_access(name, bucket, repository, self._tags, self)
        run_ends = declare_notify(name, config, profile.role, self._tags, self)
        user_data = box_user_data(
            config,
            SSH_USER,
            bucket.bucket.apply(lambda b: f"s3://{b}"),
            programs,
            notify_topic_arn=run_ends.arn,
        )
        instances = self._instances(network, profile, user_data, programs_object)
        address = aws.ec2.Eip(
            f"{name}-ip-0",
            domain="vpc",
            instance=instances[0].id,
            tags=self._tags,
            opts=self._child(depends_on=[network.internet_gateway]),
        )
        if config.spot:
            for index, instance in enumerate(instances):
                SpotRequestGuard(f"{name}-spot-request-{index}", instance, config.region, self)
        daily_stop = guard_rails.declare_daily_stop(
            name, config, instances, self._tags, parent=self
        )
        budget = guard_rails.declare_budget(name, config, self._tags, parent=self)
        if config.budget_stops_boxes:
            guard_rails.declare_budget_stop(
                name, config, budget, instances, self._tags, parent=self
            )
        if config.activate_cost_allocation_tag:
            guard_rails.activate_cost_scope_tag(name, parent=self)
        guard_rails.declare_idle_alarms(name, config, instances, self._tags, parent=self)

        self._expose(
            hosts=pulumi.Output.all(address.public_ip),
            private_hosts=pulumi.Output.all(*[instance.private_ip for instance in instances]),
            box_ids=pulumi.Output.all(*[instance.id for instance in instances]),
            ssh_user=SSH_USER,
            storage_uri=bucket.bucket.apply(lambda b: f"s3://{b}"),
            registry=repository.repository_url.apply(lambda url: url.split("/", 1)[0]),
            image_repository=repository.repository_url,
            # What the first box really boots (kept by ignore_changes), to pin it with.
            cloud_outputs={
                StackOutput.AMI_ID: instances[0].ami,
                # `fab train --hours` moves this schedule's start past the run's deadline.
                StackOutput.DAILY_STOP_SCHEDULES: pulumi.Output.all(daily_stop.name),
                StackOutput.NOTIFY_TOPIC_ARN: run_ends.arn,
            },
        )

    def _child(self, **kwargs) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kwargs)

    def _instances(
        self,
        network: AwsNetwork,
        profile: aws.iam.InstanceProfile,
        user_data: pulumi.Output[str],
        programs: aws.s3.BucketObjectv2,
    ) -> list[aws.ec2.Instance]:
        """The boxes; each boots after the programs' archive is in the bucket."""
        config, name = self._config, self._name
        key_pair = aws.ec2.KeyPair(
            f"{name}-key", public_key=config.ssh_public_key, tags=self._tags, opts=self._child()
        )
        placement_group = None
        if config.node_count > 1:
            placement_group = aws.ec2.PlacementGroup(
                f"{name}-cluster", strategy="cluster", tags=self._tags, opts=self._child()
            ).name
        spot = {
            "market_type": "spot",
            "spot_options": {
                # Persistent + stop: capacity comes back to the same disk and resumes.
                "instance_interruption_behavior": "stop",
                "spot_instance_type": "persistent",
                # Left out, a persistent request lapses 7 days after launch, and after that
                # nothing brings an interrupted box back (stack/spot_requests.py).
                "valid_until": spot_request_valid_until(),
            },
        }
        ami_id = config.ami_id or self._ami_id()
        # An instance never moves by itself: a changed user data would stop and start it
        # (and cloud-init would not re-run it), a newer looked-up AMI would replace it.
        # A pinned `amiId` is the user's deliberate choice, so changing it does replace.
        ignored = ["user_data", "user_data_base64"] + ([] if config.ami_id else ["ami"])
        # Computed at each up, it would replace the boxes: the first one stands.
        ignored += ["instanceMarketOptions.spotOptions.validUntil"] if config.spot else []
        return [
            aws.ec2.Instance(
                f"{name}-box-{index}",
                ami=ami_id,
                instance_type=config.vm_size,
                subnet_id=network.subnet.id,
                vpc_security_group_ids=network.groups(index),
                # Outbound only (image pulls, S3, CloudWatch): AWS's own address, not an
                # Elastic IP; box 0 keeps None, its Elastic IP serves (and a False would
                # read back True once the Elastic IP is attached: provider issue #37318).
                associate_public_ip_address=True if index > 0 else None,
                key_name=key_pair.key_name,
                iam_instance_profile=profile.name,
                placement_group=placement_group,
                metadata_options={
                    "http_endpoint": "enabled",
                    "http_tokens": "required",
                    "http_put_response_hop_limit": IMDS_HOP_LIMIT,
                },
                # The watchdog's `shutdown -h now` must stop billing, not lose the disk.
                instance_initiated_shutdown_behavior="stop",
                root_block_device={
                    "volume_type": "gp3",
                    "volume_size": config.os_disk_size_gb,
                    "encrypted": True,
                    "delete_on_termination": True,
                },
                instance_market_options=spot if config.spot else None,
                user_data_base64=user_data,
                user_data_replace_on_change=False,
                tags={**self._tags, "Name": f"{name}-box-{index}"},
                volume_tags=self._tags,
                opts=self._child(ignore_changes=ignored, depends_on=[programs]),
            )
            for index in range(config.node_count)
        ]

    def _ami_id(self) -> pulumi.Output[str]:
        """The newest matching AMI today; kept on existing boxes by ignore_changes. Its
        root snapshot must fit the disk: no reference says how big an AMI's snapshot is
        before the look-up, and EC2 refuses a smaller root volume at launch (a pinned
        `amiId` is the one the boxes already booted, so it is not looked up)."""
        major, minor = (int(p) for p in self._config.size.gpu.compute_capability.split("."))
        owner, pattern = (
            (DLAMI_OWNER, DLAMI_NAME)
            if (major, minor) >= OSS_DRIVER_MIN_COMPUTE_CAPABILITY
            else (UBUNTU_OWNER, UBUNTU_NAME)
        )
        return aws.ec2.get_ami_output(
            owners=[owner],
            most_recent=True,
            filters=[
                {"name": "name", "values": [pattern]},
                {"name": "architecture", "values": ["x86_64"]},
                {"name": "state", "values": ["available"]},
            ],
            opts=pulumi.InvokeOutputOptions(parent=self),
        ).apply(self._fitting_disk)

    def _fitting_disk(self, image: aws.ec2.GetAmiResult) -> str:
        """`image`'s id, once its root snapshot fits `osDiskSizeGb`."""
        root = next(
            (m for m in image.block_device_mappings if m.device_name == image.root_device_name),
            None,
        )
        snapshot_gb = int((root.ebs if root else {}).get("volume_size") or 0)
        if snapshot_gb > self._config.os_disk_size_gb:
            raise ValueError(
                f"osDiskSizeGb: {self._config.os_disk_size_gb} GB is smaller than the root "
                f"snapshot of {image.id} ({image.name}), {snapshot_gb} GB; set "
                f"glucose-training:osDiskSizeGb to {snapshot_gb} or more"
            )
        return image.id
